"""The embedded local stack: LocalStack core on this host with fanfit's plugins, no Docker.

- :func:`up` starts it (or reuses the running one) and deploys ``template.yaml``; :func:`down` stops
  it; :func:`status` says where it stands (``fanfit local up|down|status``).
- :func:`ensure_local_stack` uses the running stack or starts one, and leaves it running.
- :class:`LocalStack` (:mod:`fanfit.local.process`) and :func:`fanfit.local.deploy.deploy` are the
  parts underneath; :mod:`fanfit.local.stack` puts them together (process <- deploy <- stack).

See DESIGN.md, "The local stack", and ``localstack_plugins/`` for the LocalStack side.
"""

from fanfit.local.stack import LocalStack, StackInfo, down, ensure_local_stack, status, up

__all__ = ["LocalStack", "StackInfo", "down", "ensure_local_stack", "status", "up"]
