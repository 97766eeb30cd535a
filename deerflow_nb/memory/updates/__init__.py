"""The change side: every change to memory is a ``ChangeSet`` that the ``gate`` checks
(validation, wipe guard, review, provenance) and the ``write_protocol``'s ledger commits,
journal first, as a version; edits, review, transfers and upkeep are its callers."""
