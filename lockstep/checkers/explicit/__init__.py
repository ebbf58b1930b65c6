"""The explicit engines over concrete states: breadth- and depth-first search (``search``), the
reference every other engine is tested against, and leads-to under weak fairness on the explored
state graph (``liveness``)."""
