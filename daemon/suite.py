"""The eval suite of a run: its sets read once, scored at every eval, and the fixed generations.

    sftHeld  held-out SFT pairs (the run's own measure; picks best in SFT mode)
    ptVal    Portuguese validation text (picks best in pretrain mode)
    enRuler  English text, the ruler drift is measured with (EVAL_EN_ALL=0: a fixed subsample)
    others   any other set of the manifest (a held-out domain, `tatu data build --eval ptFaq=FILE`):
             scored whole at every eval and compared with step 0 like the three, never judged

A set whose pairs carry a checkable answer (docs/data.md) is also asked every pair at every eval:
its answers right, by exact match (tatu.evals.answers), beside its perplexity. The fixed
generations (TATU_GEN_PROMPTS) stay beside them for what they show that answers do not: free text
to TATU_GEN_TOKENS tokens and its invented words, on sets without answers too.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from tatu.daemon.config import RunConfig
from tatu.data.answers import AnswerItem, answer_items
from tatu.data.manifest import DataError
from tatu.data.sft import SFTExample, read_sft_file
from tatu.data.tags import read_tags, untagged_line
from tatu.evals.answers import AnswerResult, score_answers
from tatu.evals.choice import TaskResult, read_task, score_task
from tatu.evals.categories import category_results, token_categories, word_chars
from tatu.evals.downstream import exact_match, wilson_interval
from tatu.evals.scoring import SetResult, evaluate
from tatu.evals.sets import EvalSet, load_eval_set, subsample
from tatu.evals.words import Dictionary, invented_rate
from tatu.formats import eval_name_problem, ordered_sets
from tatu.model.chat import encode_prompt

RULER = "enRuler"
REFERENCE_SETS = (RULER, "ptVal")  # what a trunk stores for drift_tronco (and a ptVal twin)


def best_set(mode: str) -> str:
    """Best checkpoint by sftHeld only, never by the ruler (a trunk has no SFT: ptVal)."""
    return "sftHeld" if mode == "sft" else "ptVal"


@dataclass
class Suite:
    sets: dict[str, EvalSet]
    notes: dict[str, str]  # e.g. {"enRuler": "16/166 lines"} when subsampled
    file_hashes: dict[str, str]
    gen_pairs: list[tuple[str, str]]
    dictionary: Dictionary | None
    # per tagged set: each target token's category (tatu.evals.categories) and its words' characters
    categories: dict[str, list[list[str | None]]] = field(default_factory=dict)
    category_chars: dict[str, dict] = field(default_factory=dict)
    category_note: str | None = None  # why there are no category metrics (one line), None when there are
    tasks: dict[str, list] = field(default_factory=dict)  # multiple-choice task -> its items (tatu.evals.choice)
    answers: dict[str, list[AnswerItem]] = field(default_factory=dict)  # set -> its pairs' answers (sets with them only)


def _load_tasks(suite: Suite, manifest: dict, data_dir) -> None:
    for name, entry in manifest.get("tasks", {}).items():
        suite.tasks[name] = read_task(data_dir / entry["file"], entry["sha256"])


def load_answers(sets: dict[str, EvalSet]) -> dict[str, list[AnswerItem]]:
    """{set: its pairs' answers} for every pairs set that carries them (the others are absent): the
    file `tatu data build` copied, read by the one pair parser. Marked on some pairs only: exit 65."""
    out = {}
    for name, eval_set in sets.items():
        if eval_set.kind != "pairs":
            continue
        examples = [e for e in read_sft_file(eval_set.path) if isinstance(e, SFTExample)]
        try:
            items = answer_items(examples, eval_set.path)
        except ValueError as exc:
            raise DataError(str(exc)) from None
        if items:
            out[name] = items
    return out


def set_categories(sets: dict[str, EvalSet], manifest: dict, data_dir, tokenizer) -> tuple[dict, dict, str | None]:
    """(each tagged set's per-token categories, its words' characters, the one-line note on the
    sets without tags) from the tags stored at data build, checked against the manifest's hash (an
    edited tag file is exit 65). For the daemon's suite and whatever re-scores a run's checkpoints."""
    categories, chars = {}, {}
    for name, eval_set in sets.items():
        tags = manifest["evals"][name].get("tags") or {}
        if "file" not in tags:
            continue
        units = read_tags(data_dir / tags["file"], tags["sha256"])
        if len(units) != eval_set.n_lines_total:
            raise DataError(f"{data_dir / tags['file']}: {len(units)} tagged lines for {eval_set.n_lines_total} "
                            f"scored lines of {name}; rebuild the data dir")
        categories[name] = token_categories(eval_set, tokenizer, units)
        chars[name] = word_chars(eval_set, tokenizer, categories[name])
    return categories, chars, untagged_line({name: manifest["evals"][name] for name in sets})


def load_eval_sets(config: RunConfig, manifest: dict, tokenizer, names: tuple[str, ...] | None = None,
                   ) -> tuple[dict[str, EvalSet], dict[str, str], dict[str, str]]:
    """(sets, notes, file sha256s) of the manifest's eval sets (all, or those among `names`), each
    as the run scores it: the ruler whole, or its seeded subsample (EVAL_EN_ALL=0). The one rule,
    for the daemon and for whatever re-scores a run's checkpoints (the sweep's scores)."""
    sets, notes, hashes = {}, {}, {}
    manifest_evals = manifest.get("evals", {})
    for name in ordered_sets(manifest_evals):
        if names is not None and name not in names:
            continue
        entry = manifest_evals[name]
        problem = eval_name_problem(name)
        if problem:
            raise DataError(f"{config.data / 'manifest.json'}: {problem}; rebuild with `tatu data build`")
        path = config.data / entry["file"]
        eval_set = load_eval_set(path, tokenizer, name=name)
        hashes[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        if name == RULER:
            eval_set, note = subsample(eval_set, config.eval_en_all, config.eval_en_batches, config.eval_en_lines_per_batch,
                                         seed=config.seed)
            notes[name] = note
        sets[name] = eval_set
    return sets, notes, hashes


def load_suite(config: RunConfig, manifest: dict, tokenizer) -> Suite:
    data_dir = config.data
    sets, notes, hashes = load_eval_sets(config, manifest, tokenizer)
    missing = [n for n in (best_set(config.mode), RULER) if n not in sets]
    if missing:
        raise DataError(f"{data_dir / 'manifest.json'}: eval sets {missing} are required and missing")
    gen_pairs = []
    if "sftHeld" in sets and config.gen_prompts:
        # The file loaded above: every line is a valid pair; messages-form lines have no one prompt.
        examples = read_sft_file(data_dir / manifest["evals"]["sftHeld"]["file"])
        gen_pairs = [(e.prompt, e.response) for e in examples if isinstance(e, SFTExample) and e.prompt is not None]
        gen_pairs = gen_pairs[:config.gen_prompts]
    dictionary = None
    dict_path = data_dir / "dictionary.json"
    if dict_path.exists():
        try:
            dictionary = Dictionary.load(dict_path)
        except ValueError as exc:
            raise DataError(str(exc)) from None
    suite = Suite(sets, notes, hashes, gen_pairs, dictionary)
    suite.categories, suite.category_chars, suite.category_note = set_categories(sets, manifest, data_dir, tokenizer)
    _load_tasks(suite, manifest, data_dir)
    suite.answers = load_answers(sets)
    return suite


def score_suite(model, suite: Suite, device, config: RunConfig, only: tuple[str, ...] | None = None,
                map_batches=None) -> dict[str, SetResult]:
    """Every set (or those in `only`) scored whole or as its declared subsample.

    Each result carries the sha256 of its file in `extra`: a trunk's stored result is
    comparable only with one scored on the same file. `map_batches`: several ranks share the
    scoring (daemon/distributed.py), each line's score unchanged."""
    results = {}
    for name, eval_set in suite.sets.items():
        if only is not None and name not in only:
            continue
        result = evaluate(model, eval_set, device=device, n_resamples=config.eval_resamples, seed=config.seed,
                          map_batches=map_batches, per_token=name in suite.categories)
        result.extra["file_sha256"] = suite.file_hashes.get(name)
        results[name] = result
    return results


def score_categories(suite: Suite, results: dict[str, SetResult], config: RunConfig) -> dict[str, dict[str, SetResult]]:
    """{set: {category: result}} of every tagged set among `results`, from the per-token NLLs of
    their scoring (no extra forward)."""
    return {name: category_results(result, suite.categories[name], suite.category_chars[name],
                                   config.eval_resamples, config.seed)
            for name, result in results.items() if name in suite.categories}


def score_tasks(model, suite: Suite, tokenizer, device, map_batches=None) -> dict[str, TaskResult]:
    """Every multiple-choice task: acc and acc_norm per item (the choices of all items batched)."""
    return {name: score_task(model, items, tokenizer, name, device, map_batches) for name, items in suite.tasks.items()}


def score_answer_sets(model, suite: Suite, tokenizer) -> dict[str, AnswerResult]:
    """Every set with answers: each pair's greedy response, right or wrong (the model in eval mode)."""
    return {name: score_answers(model, items, tokenizer, name) for name, items in suite.answers.items()}


def generate_samples(model, suite: Suite, tokenizer, device, config: RunConfig) -> dict | None:
    """Fixed sftHeld prompts, greedy, one batch: the text, invented words, downstream accuracy."""
    if not suite.gen_pairs:
        return None
    prompts = [encode_prompt(tokenizer, p) for p, _ in suite.gen_pairs]
    was_training = model.training
    model.eval()
    outputs = model.generate(prompts, config.gen_tokens, eos_id=tokenizer.eos_id)
    model.train(was_training)
    texts = [tokenizer.decode(o) for o in outputs]
    accuracy = exact_match(texts, [r for _, r in suite.gen_pairs])
    sample = {
        "samples": [{"prompt": p, "reference": r, "output": t} for (p, r), t in zip(suite.gen_pairs, texts)],
        "accuracy": {"value": accuracy.accuracy, "lo": accuracy.lo, "hi": accuracy.hi, "n": accuracy.n},
        "invented": None,
    }
    if suite.dictionary is not None:
        inv = invented_rate(texts, suite.dictionary)
        # a Wilson 95% interval over the generated words (each word invented or not)
        lo, hi = wilson_interval(inv.n_invented, inv.n_words) if inv.n_words else (None, None)
        sample["invented"] = {"rate": inv.rate, "lo": lo, "hi": hi, "n_words": inv.n_words, "n_invented": inv.n_invented,
                              "examples": inv.examples[:10]}
    return sample
