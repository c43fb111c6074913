"""``python -m facade`` runs the kmq CLI."""

from facade.cli import main

main()
