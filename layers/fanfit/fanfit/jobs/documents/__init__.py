"""Job documents: pydantic models of what the client and the steps write to S3 and pass between states.

One module per job kind (:mod:`.estimate`, :mod:`.train`): the job spec, its plan, the wave and round
plans and each step's input and output. Every reader parses a document through its model, so a
malformed document raises :class:`fanfit.errors.InvalidJobError` naming the field.
"""
