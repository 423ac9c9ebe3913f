"""The app's support module (:mod:`lib.app.support`): what ``notebooks/tune_spec_k.py`` needs
besides the analysis and the presentation layer."""
