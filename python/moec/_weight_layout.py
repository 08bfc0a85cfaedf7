"""WeightLayout, the layout a layer's kernels read. Its own module because
both weights.py (weight preparation) and runtime.py (Layer.weight_layout)
need it, and neither may import the other."""

from . import _capi

__all__ = ["WeightLayout"]


class WeightLayout:
    """hidden, intermediate (padded as compiled), experts (this rank's),
    gate_up_interleave (G; 0 = gate rows then up rows) and shared_expert."""

    def __init__(self, hidden, intermediate, experts, gate_up_interleave=0, shared_expert=False):
        self.hidden, self.intermediate, self.experts = int(hidden), int(intermediate), int(experts)
        self.gate_up_interleave = int(gate_up_interleave)
        self.shared_expert = bool(shared_expert)

    @classmethod
    def _from_c(cls, c):
        return cls(c.hidden, c.intermediate, c.experts, c.gate_up_interleave, c.shared_expert)

    def _c(self):
        return _capi.WeightLayout(self.hidden, self.intermediate, self.experts,
                                  self.gate_up_interleave, 1 if self.shared_expert else 0)

    def shapes(self):
        """Shapes of the prepared tensors (uint8 bytes)."""
        H, I, E = self.hidden, self.intermediate, self.experts
        shapes = {"w13": (E, 2 * I, H // 2), "w13_scale": (E, 2 * I, H // 32),
                  "w2": (E, H, I // 2), "w2_scale": (E, H, I // 32)}
        if self.shared_expert:
            shapes.update({"shared_w13": (2 * I, H), "shared_w13_scale": (2 * I, H // 32),
                           "shared_w2": (H, I), "shared_w2_scale": (H, I // 32)})
        return shapes

    def __repr__(self):
        return ("WeightLayout(hidden=%d, intermediate=%d, experts=%d, gate_up_interleave=%d, "
                "shared_expert=%s)" % (self.hidden, self.intermediate, self.experts,
                                       self.gate_up_interleave, self.shared_expert))
