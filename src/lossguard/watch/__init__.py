"""``lossguard watch``: follow live runs and name what happens, with the detectors and words of ``analyze``.

One concept per module, in the order data flows:

* ``tail``: the new bytes of one file, surviving rotation and truncation;
* ``lines``, ``tfevents``, ``wholefile``: those bytes as points, per format, through the readers'
  own parsers (line logs; TensorBoard records; files rewritten whole);
* ``follower``: the files of one run, found as they appear;
* ``history``: the newest points of the run, bounded, as a RunLog;
* ``trigger``: the online detectors on the loss (alerts, and when to classify);
* ``engine``: incidents decided by the analyser's own classification, printed once;
* ``events``, ``alerts``: what is printed, and the hooks (command, webhook) that receive it;
* ``session``, ``sweep``: one run followed end to end; a directory of runs.

See docs/watch.md.
"""
