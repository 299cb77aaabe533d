"""userdp's mechanisms core: secure noise, mechanisms and privacy accounting. Imports no Beam.

Privacy model. The privacy unit is a *person* (one value of the configured person column).
Neighbouring data sets differ by adding or removing all rows of one person; every guarantee stated
in this package is for that relation. Mechanisms here are pure functions of sufficient statistics
whose sensitivity to that change the caller declares (the Beam layer derives it from the
contribution bounds). The machines that run the pipeline and the operator are trusted; readers of
the outputs are not. Timing side channels are out of scope.

Randomness. All noise is drawn from :class:`rng.KeyedRng` streams keyed by the release secret and
a label; samplers are exact on the integers (:mod:`discrete`); real-valued noise is integer noise
on a power-of-two grid.
"""
