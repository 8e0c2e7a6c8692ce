"""``lossguard watch``: follow live runs and name what happens, with the detectors and words of ``analyze``.

``tail`` reads the new bytes of a file, ``decoders`` turn them into points per format, ``follower``
finds the files of a run (new ones, rotated ones), ``history`` keeps the newest points, ``engine``
decides incidents, ``alerts`` prints them and runs hooks, ``sweep`` follows many runs at once.
"""
