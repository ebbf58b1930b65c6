"""Judging a recorded trace against a model: which model judges it (``model_choice``), replaying its
events (``events``, ``replay``, ``result``), explaining a divergence (``divergence``), the verdict with
its evidence (``judgement``, ``guard_coverage``), and the coverage goals a runtime test drives
towards (``goals``)."""
