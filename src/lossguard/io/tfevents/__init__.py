"""The TensorBoard event-file decoders, shared by the reader and by ``lossguard watch``.

Public inside the package (no leading underscore) because two folders use them:
:mod:`lossguard.io.tensorboard` reads whole files, :mod:`lossguard.watch.tfevents` decodes the
records a live writer appends.

* :mod:`.record`: TFRecord framing and both CRC32Cs, at numpy speed.
* :mod:`.proto`: the ``Event`` protocol buffer, one record at a time (the exact, slow path).
* :mod:`.batch`: every record of a file decoded by byte layout with numpy (the fast path).
* :mod:`.rules`: how tags are named and where a file's steps restart, one definition for both users.
"""
