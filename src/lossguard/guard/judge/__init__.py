"""The judge: one step's loss and gradient norm -> a typed :class:`~lossguard.recovery.Verdict`.

Everything that decides whether a step is *bad* lives in this folder, one concept per file:

- ``twins``: :class:`HostJudge` (floats, torch-free) and :class:`DeviceJudge` (0-d tensors), equal
  bit for bit, each returning a :class:`Judgement`;
- ``evidence``: the calibrated rule (:class:`EvidenceConfig`) -- which tests make a step bad -- and
  its vectorised twin :func:`evidence_series` that ``lossguard simulate`` replays;
- ``tail``: the grad-norm tail statistic (host, device and vectorised);
- ``device_stats``: :class:`DeviceOutlier`, the analyser's outlier test on the device (needs torch).

The verdict type itself (:class:`lossguard.recovery.Verdict`, :class:`Evidence`) is the policy's
input and lives with the policy in :mod:`lossguard.recovery`. Torch is imported only by the device
twin, so ``lossguard simulate`` and ``analyze`` use this package without it.
"""
from .evidence import ColdBound, EvidenceConfig, LossShift, evidence_series, grad_evidence, onset_lag
from .twins import DeviceJudge, HostJudge, Judgement, plain

__all__ = ["ColdBound", "DeviceJudge", "EvidenceConfig", "HostJudge", "Judgement", "LossShift", "evidence_series",
           "grad_evidence", "onset_lag", "plain"]
