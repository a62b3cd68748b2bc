"""Forward-mode AD with nested levels (see issue 5): not built yet; no level is ever active."""


def active() -> bool:
    return False


def propagate(rule, out, inputs, params):  # pragma: no cover - placeholder until levels exist
    raise NotImplementedError
