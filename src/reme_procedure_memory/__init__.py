"""reme-procedure-memory: a ReMe plugin that turns trajectories into procedural experiences.

Classes are registered through ``plugin.yaml`` (never ``@R.register``); importing this package has no side effects.
"""

__version__ = "0.1.0"
