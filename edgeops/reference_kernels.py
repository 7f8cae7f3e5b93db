"""Registers every op's numpy reference as a kernel of the ``reference`` target, so dispatch,
the support matrix and the CLI are exercised by real entries; targets are checked against it."""
from edgeops.ops import all_ops
from edgeops.registry import REFERENCE, op_key, register_kernel


def _register_all() -> None:
    for od in all_ops():
        def run(inputs, attrs, _od=od):
            return _od.run(inputs, attrs)
        register_kernel(op_key(od.name, od.domain), REFERENCE, dtypes=("fp32", "fp64"),
                        name=f"reference.{od.name}", doc=f"numpy reference of {od.qualname()}")(run)


_register_all()
