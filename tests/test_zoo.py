"""edgeops.zoo: the onnx package's light models with random weights."""
import numpy as np
import onnx
import pytest

from edgeops.errors import EdgeOpsError
from edgeops.zoo import light_model, light_names, light_path, randomise_weights


def test_light_models_are_found_and_unknown_names_listed():
    assert {"resnet50", "squeezenet"} <= set(light_names())
    with pytest.raises(EdgeOpsError, match="have: .*squeezenet"):
        light_path("nosuch")


def test_randomised_weights_are_constants_not_inputs_and_not_degenerate():
    m = light_model("squeezenet", seed=1)
    onnx.checker.check_model(m)
    assert not any(n.op_type == "ConstantOfShape" for n in m.graph.node)
    inits = {t.name for t in m.graph.initializer}
    assert not inits & {i.name for i in m.graph.input}
    w = [onnx.numpy_helper.to_array(t) for t in m.graph.initializer if len(t.dims) == 4]
    assert w and all(np.std(a) > 0 for a in w)
    fan_in = np.prod(w[0].shape[1:])
    assert abs(np.std(w[0]) * np.sqrt(fan_in) - 1) < 0.2        # N(0, 1/fan_in)


def test_he_scale_and_bad_scale(rng):
    m = onnx.load(str(light_path("squeezenet")))
    he = randomise_weights(m, rng, scale="he")
    a = next(onnx.numpy_helper.to_array(t) for t in he.graph.initializer if len(t.dims) == 4)
    assert abs(np.std(a) * np.sqrt(np.prod(a.shape[1:]) / 2) - 1) < 0.2
    with pytest.raises(EdgeOpsError, match="scale"):
        randomise_weights(m, rng, scale="xavier")
