"""Dropout, inference only: y = x. Inputs data, ratio (optional), training_mode (optional). Only
y is produced (the mask output is a training artefact); training_mode=True is refused."""
from edgeops.errors import OpDefinitionError
from edgeops.ops.base import Attr, OpDef, define_op


@define_op
class Dropout(OpDef):
    name = "Dropout"
    min_inputs, max_inputs = 1, 3
    # ratio/is_test were attributes before opset 12 (old exports such as the light_* models)
    attrs = {"seed": Attr("int", None), "ratio": Attr("float", None), "is_test": Attr("int", None)}
    flops_per_element = 0

    @classmethod
    def reference(cls, x, *optional, **_attrs):
        # optional inputs: ratio (ignored at inference), training_mode
        training_mode = optional[1] if len(optional) > 1 else None
        if training_mode is not None and bool(training_mode):
            raise OpDefinitionError(f"{cls.name}: training_mode=True is not supported; edgeops "
                                    f"runs inference only (export the model in eval mode)")
        return x.copy()
