"""The engine benchmark's one table: every run (engine, the native and converted artefacts, settings, label) is a
``Row`` of ``rows``; the settings it draws from are declared here once."""

from __future__ import annotations

from dataclasses import dataclass, field

DEMO_VOCAB = 50257  # GPT-2's vocabulary size: the demo model's 4096 rows padded with zeros


RECOMMENDED_LLAMA = {"flash_attn": False, "type_k": "f32", "type_v": "f16"}


LLAMA_SETTINGS = {  # name: (settings, rope base set in the GGUF metadata)
    "-fa off -ctk f32 (recommended)": (RECOMMENDED_LLAMA, True),
    "-fa off -ctk f32 -ctv f32": ({"flash_attn": False, "type_k": "f32", "type_v": "f32"}, True),
    "binding defaults (-fa off, f16 K/V cache)": ({"flash_attn": False, "type_k": "f16", "type_v": "f16"}, True),
    "-fa on (f16 K/V cache)": ({"flash_attn": True, "type_k": "f16", "type_v": "f16"}, True),
    "-fa off -ctk f32, base not set (converter's 10000)": (RECOMMENDED_LLAMA, False),
}


FIXED_BASE = {"rope_base": 10000.0, "rotary_dim": 32, "pairs": 3}


# Half precision: the frequency ladder on the base engines' converters assume (nothing set in the GGUF), the
# engine's default settings, native BLOOM in the same GGUF type and settings beside it.
LADDER = {"dtype": "float16", "strategy": "ladder", "rope_base": 10000.0, "rotary_dim": 32}


@dataclass(frozen=True)
class Recipe:
    """A recipe printed in the README (``recipes``), run for MODEL at CONTEXT in ENGINE's environment; what it
    makes replaces the benchmark's own: ``checkpoints`` (a ``convert_rope`` key -> a directory it writes, from
    which the other engine files are made) and ``artefacts`` (an engine file key -> a file it writes)."""

    engine: str
    model: tuple[str, int]
    checkpoints: dict = field(default_factory=dict)
    artefacts: dict = field(default_factory=dict)


RECIPES = {
    "llama.cpp-float32": Recipe("llama.cpp", ("demo", 2048), artefacts={"converted+base": "demo-f32-base.gguf"}),
    "llama.cpp-float16": Recipe("llama.cpp", ("demo", 2048), checkpoints={"ladder": "demo-f16"},
                                artefacts={"ladder-f16": "demo-f16.gguf"}),
    "ctranslate2-float32": Recipe("ctranslate2", ("demo", 2048), artefacts={"converted+base+fold": "demo-ct2"}),
}


def recipe_of(engine: str, model: tuple[str, int], key: str) -> dict:
    """``{"recipe": name}`` of the recipe that makes ENGINE's file KEY, or the checkpoint KEY it is made from, for
    MODEL (name, context); ``{}`` where none does (a row's ``described`` takes it as is)."""
    made = next((r for r, rec in RECIPES.items() if rec.engine == engine and rec.model == model
                 and (key in rec.artefacts or key.rsplit("-", 1)[0] in rec.checkpoints)), None)
    return {"recipe": made} if made else {}


CALIBRATED = ("demo",)  # models whose ladder floors are measured (ladder_floors); the rest are uncalibrated


LADDER32 = {**LADDER, "dtype": "float32"}  # for an f32 K cache: q and k never rounded to 16 bits


LADDER32_GGUF_TYPES = ("f32", "f16")


LADDER32_LLAMA = {"-fa off -ctk f32 (f16 V cache)": {"flash_attn": False, "type_k": "f32", "type_v": "f16"}}


# R = 64 (head 32 -> 96 on the demo, a size fast kernels take): half the amplitudes' root sum of squares
LADDER64 = {**LADDER, "rotary_dim": 64}


HALF_GGUF_TYPES = ("f32", "f16", "q8_0", "q4_k_m")  # f32: the float16 checkpoint widened


QUANTIZED = {"q4_k_m": "f32"}  # made by llama.cpp's quantizer from that GGUF (its converter writes no K-quants)


HALF_LLAMA = {  # llama.cpp's own defaults: f16 K/V cache, flash attention off, then on; then an f32 K cache
    "binding defaults (-fa off, f16 K/V cache)": {"flash_attn": False, "type_k": "f16", "type_v": "f16"},
    "-fa on (f16 K/V cache)": {"flash_attn": True, "type_k": "f16", "type_v": "f16"},
    "-fa off -ctk f32 (f16 V cache)": {"flash_attn": False, "type_k": "f32", "type_v": "f16"},
}


LADDER_RUNS = (  # converted checkpoint and GGUF file prefix, plan, GGUF types, settings by label
    ("ladder", LADDER, HALF_GGUF_TYPES, HALF_LLAMA),
    ("ladder32", LADDER32, LADDER32_GGUF_TYPES, LADDER32_LLAMA),
    ("ladder64", LADDER64, ("f16",), {k: HALF_LLAMA[k] for k in list(HALF_LLAMA)[:2]}),
)


LADDERS = {prefix: plan for prefix, plan, *_ in LADDER_RUNS}
# the ladder on Nemotron (residual stream at its width), float32: what transformers 4.x reads of its config
NEMOTRON_LADDER = {"dtype": "float32", "strategy": "ladder", "target": "nemotron"}


def flags(plan: dict) -> str:
    """A plan as the ``ropebridge convert`` flags that make it (the emulation implied)."""
    names = {"dtype": "--dtype", "rope_base": "--rope-base", "rotary_dim": "--rotary-dim", "pairs": "--pairs"}
    return " ".join(f"{names[k]} {v:g}" if isinstance(v, float) else f"{names[k]} {v}"
                    for k, v in plan.items() if k in names)


FIXED_BASE_LABEL = f"converted with {flags(FIXED_BASE)}, engine converter as is"


RECOMMENDED_CT2 = "float32, base set, 1/sqrt(d) folded into the queries (recommended)"


FOLDED = "1, 1/sqrt(d) folded into the query projection"


KERNEL_SCALE = "kernel's 1/sqrt(d) (GEMM alpha)"


CT2_SETTINGS = {  # label: (the converted model's CTranslate2 directory, a key of ct2_dirs; what it carries)
    RECOMMENDED_CT2: ("converted+base+fold", {"rotary_base": "set in the spec", "queries_scale": FOLDED}),
    "float32, base set in the spec, kernel applies 1/sqrt(d)": (
        "converted+base", {"rotary_base": "set in the spec", "queries_scale": KERNEL_SCALE}),
    "float32, converter as is (base 10000)": (
        "converted", {"rotary_base": "converter's (10000)", "queries_scale": KERNEL_SCALE}),
}


@dataclass(frozen=True)
class Row:
    """One row of the results: an engine runs the native artefact and the converted one (keys of the engine's
    ``artefacts``) with the same ``settings``; ``described`` adds what the row's files carry (base, GGUF type,
    plan) to the recorded settings. ``quick``: part of ``--quick``."""

    engine: str
    label: str
    native: str
    converted: str
    settings: dict
    described: dict = field(default_factory=dict)
    quick: bool = False
    checkpoint: str = "converted"  # the ``convert_rope`` checkpoint the converted artefact is made from


def select(name: str, engines: list[str], quick: bool, threads: int, context: int = 2048) -> list[Row]:
    """The rows this invocation runs: ENGINES' rows for model NAME (``--quick``: only the quick ones, with no
    recipe: those run only at their own context)."""
    return [r for r in rows(name, threads, 0 if quick else context) if r.engine in engines and (r.quick or not quick)]


def rows(name: str, threads: int, context: int = 2048) -> list[Row]:
    """Every row for model NAME at CONTEXT, from the settings tables above: the one place a run is declared
    (a row whose files a recipe makes at this context names it)."""
    floors = "calibrated" if name in CALIBRATED else "uncalibrated"
    out = []
    for label, (settings, with_base) in LLAMA_SETTINGS.items():
        made = recipe_of("llama.cpp", (name, context), "converted+base" if with_base else "converted")
        out.append(Row("llama.cpp", label, "native", "converted+base" if with_base else "converted",
                       {**settings, "threads": threads},
                       {"rope_freq_base": "GGUF metadata" if with_base else "not set (10000)", "gguf": "F32",
                        **made}, quick=settings == RECOMMENDED_LLAMA))
    out.append(Row("llama.cpp", FIXED_BASE_LABEL, "native", "converted-base10000",
                   {**RECOMMENDED_LLAMA, "threads": threads},
                   {"rope_freq_base": "not set (10000)", "gguf": "F32", "plan": FIXED_BASE},
                   checkpoint="converted-base10000"))
    for prefix, plan, types, settings_by_label in LADDER_RUNS:
        for t in types:
            for label, settings in settings_by_label.items():
                made = recipe_of("llama.cpp", (name, context), f"{prefix}-{t}")
                out.append(Row("llama.cpp",
                               f"ladder ({flags(plan)}), engine converter as is, {floors}, {t.upper()} GGUF, "
                               f"{label}", f"native-{t}", f"{prefix}-{t}", {**settings, "threads": threads},
                               {"rope_freq_base": "not set (10000)", "gguf": t.upper(), "plan": plan, "floors": floors,
                                **made}, checkpoint=prefix))
    ct2 = {"threads": threads, "compute_type": "float32", "device": "cpu"}
    for label, (key, described) in CT2_SETTINGS.items():
        made = recipe_of("ctranslate2", (name, context), key)
        out.append(Row("ctranslate2", label, "native", key, ct2, {**described, **made},
                       quick=label == RECOMMENDED_CT2))
    out.append(Row("ctranslate2", FIXED_BASE_LABEL, "native", "converted-base10000", ct2,
                   {"rotary_base": "converter's (10000)", "plan": FIXED_BASE}, checkpoint="converted-base10000"))
    hf4 = {"threads": threads, "dtype": "float32"}
    out.append(Row("transformers-4", f"nemotron, ladder ({flags(NEMOTRON_LADDER)}), config as written", "native",
                   "nemotron-ladder", hf4, {"plan": NEMOTRON_LADDER}, checkpoint="nemotron-ladder"))
    out.append(Row("transformers-4", "float32, config as written (legacy rotary_pct/rotary_emb_base keys)", "native",
                   "converted", hf4, quick=True))
    out.append(Row("transformers-4", f"converted with {flags(FIXED_BASE)}", "native",
                   "converted-base10000", hf4, {"plan": FIXED_BASE}, checkpoint="converted-base10000"))
    return out
