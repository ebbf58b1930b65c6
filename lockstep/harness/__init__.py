"""Model and runtime together, one layer above ``lockstep.checkers`` and ``lockstep.impl``: running the
reference runtime under a plan chosen from the model and judging its traces with the model's
replay (runtime fuzzing, the runtime profiles and expectations a run's traces are replayed
against)."""
