"""A thread's turns into memory: the durable queue (``schedule``), the worker that folds due
rows, one fold through the memory model (``fold``: extraction prompt, parse, the gate), and
the record each fold leaves (``fold_log``)."""
