"""Megatron-core's explicit pipeline layout (`pipeline_model_parallel_layout`), read into what the kernels model.

A layout lists, stage by stage, what each virtual pipeline stage holds: `E` the input embedding,
`t` a transformer block, `m` a multi-token-prediction block, `L` the logit layer and loss; `|`
separates stages, `x*n` repeats a letter and `(...)*n` a group (DeepSeek-V3's recipe on 16
stages: ``Et*4|(t*4|)*14tmL``). Virtual stage s of n_p x v runs on pipeline rank s mod n_p.

The kernels model a layout whose middle stages hold k blocks each and whose end stages hold the
embedding and k - a blocks (first) and the blocks, MTP blocks and loss (last): the embedding and
the loss then "take" a and z blocks' places (`kernels.stage.split_slots`, Megatron's
account_for_*_in_pipeline_split being a = z = 1 with k = ceil((d + 2) / stages)). MTP blocks count
as blocks of the stage (the kernels add them to the depth, `ModelSpec.mtp`). Any other layout is
refused in one line naming what differs.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from dse.spec.checks import SpecError

#: The letters of a layout and what each stands for.
LETTERS = {"E": "embedding", "t": "transformer block", "m": "MTP block", "L": "loss"}


class Layout(NamedTuple):
    """A layout as the kernels take it."""

    stages: int  # virtual pipeline stages (n_p x v)
    blocks: int  # blocks (t and m) of each middle stage, k
    first_slots: int  # k minus the blocks of the first stage (the embedding's places)
    last_slots: int  # k minus the blocks of the last stage (the loss's places)
    layers: int  # transformer blocks (t)
    mtp: int  # MTP blocks (m)


def _expand(text: str, field: str) -> str:
    """The layout with every repetition written out (letters and '|' only)."""
    pos = 0

    def number() -> int:
        nonlocal pos
        m = re.match(r"\*([0-9]+)", text[pos:])
        if not m:
            return 1
        pos += m.end()
        return int(m.group(1))

    def sequence(closing: bool) -> str:
        nonlocal pos
        out = []
        while pos < len(text):
            ch = text[pos]
            if ch == ")":
                if not closing:
                    raise SpecError(f"{field} = {text!r}: ')' at position {pos + 1} closes no '('")
                pos += 1
                return "".join(out)
            if ch == "(":
                pos += 1
                inner = sequence(True)
                out.append(inner * number())
            elif ch in LETTERS or ch == "|":
                pos += 1
                out.append(ch * number())
            elif ch.isspace():
                pos += 1
            else:
                raise SpecError(f"{field} = {text!r}: {ch!r} at position {pos + 1} is not a layout symbol; "
                                "valid: E (embedding), t (block), m (MTP block), L (loss), |, *n, ( )")
        if closing:
            raise SpecError(f"{field} = {text!r}: a '(' is never closed")
        return "".join(out)

    return sequence(False)


def parse_layout(text: str, field: str = "pipeline_layout") -> Layout:
    """Read a layout string (`Layout`); a layout the kernels cannot model raises `SpecError`."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"{field} = {text!r}: must be a non-empty layout string such as 'Et*4|(t*4|)*14tmL'")
    stages = _expand(text.strip(), field).split("|")
    if stages and stages[-1] == "" and len(stages) > 1:
        stages = stages[:-1]  # a trailing '|' ends the last stage
    where = {ch: [i for i, s in enumerate(stages) if ch in s] for ch in "EL"}
    if where["E"] != [0] or stages[0].count("E") != 1:
        raise SpecError(f"{field} = {text!r}: the embedding E must appear once, in the first stage")
    if where["L"] != [len(stages) - 1] or stages[-1].count("L") != 1 or not stages[-1].endswith("L"):
        raise SpecError(f"{field} = {text!r}: the loss L must appear once, at the end of the last stage")
    if not stages[0].startswith("E"):
        raise SpecError(f"{field} = {text!r}: the embedding E must open the first stage")
    m_at = [i for i, s in enumerate(stages) if "m" in s]
    if m_at and (m_at != [len(stages) - 1]):
        raise SpecError(f"{field} = {text!r}: MTP blocks m are modelled on the last stage only")
    if "m" in stages[-1] and "t" in stages[-1].split("m", 1)[1]:
        raise SpecError(f"{field} = {text!r}: MTP blocks m must follow the last stage's transformer blocks")
    counts = [s.count("t") + s.count("m") for s in stages]
    if len(stages) < 2:
        k = counts[0]
        return Layout(1, k, 0, 0, stages[0].count("t"), stages[0].count("m"))
    middle = counts[1:-1]
    k = max([*middle, counts[0], counts[-1]]) if not middle else middle[0]
    if any(c != k for c in middle):
        raise SpecError(f"{field} = {text!r}: the middle stages hold {sorted(set(middle))} blocks; the kernels "
                        "model layouts whose middle stages hold the same number")
    if counts[0] > k or counts[-1] > k:
        raise SpecError(f"{field} = {text!r}: an end stage holds more blocks ({max(counts[0], counts[-1])}) than "
                        f"a middle one ({k}); the kernels model end stages that hold at most as many")
    return Layout(stages=len(stages), blocks=k, first_slots=k - counts[0], last_slots=k - counts[-1],
                  layers=sum(s.count("t") for s in stages), mtp=sum(s.count("m") for s in stages))
