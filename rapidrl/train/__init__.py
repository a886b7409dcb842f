"""The learn driver: the Algorithm base, callbacks, timing, progress, checkpoints, run directories, loggers."""
