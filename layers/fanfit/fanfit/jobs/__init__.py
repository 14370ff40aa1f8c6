"""The server side: one package of steps per job kind, the job documents, the state names and sharing.

A Lambda function makes one call into a step (:mod:`.estimate`, :mod:`.train`, :mod:`.sharing`,
or the GPU worker :mod:`.gpu`); the steps read and write :mod:`.documents` at :mod:`fanfit.storage`'s
keys. Nothing is imported here, so a handler loads only the step it runs.
"""
