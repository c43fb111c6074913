"""``python -m facade.cli`` runs the kmq CLI."""

from facade.cli import main

main()
