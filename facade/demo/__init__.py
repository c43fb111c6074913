"""``kmq demo``: an end-to-end workload on real input, the Debian changelogs on this machine.

Modules, in the order a run uses them:

* :mod:`facade.demo.corpus`: parse ``/usr/share/doc/*/changelog.Debian.gz`` (python-debian).
* :mod:`facade.demo.mapping`: entry -> message (label, body, priority, ``debian.*`` properties;
  the table is in that module's docstring) and entry -> distribution queue.
* :mod:`facade.demo.stack`: configured brokers, the running dev stack, or a local broker the
  demo starts and stops.
* :mod:`facade.demo.workload`: queues, alias and distribution list; routes; senders,
  receivers, the responder, the poison record.
* :mod:`facade.demo.ledger`: every copy sent and every outcome seen; the verdict.
* :mod:`facade.demo.report`: the report, through the Spark hook :func:`~facade.demo.report.spark_report`
  or the Python fallback.
* :mod:`facade.demo.runner`: the phases, progress bars, timings and summary.
"""

from facade.demo.runner import DemoOptions, DemoResult, run_demo

__all__ = ["DemoOptions", "DemoResult", "run_demo"]
