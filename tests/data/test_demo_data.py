"""Demo data: the generated SFT pairs are right, the demo files are disjoint and deterministic."""
from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from strict import cannot_run

from tatu.data.demo import sources as demo, text as demo_text
from tatu.ops import packages
from tatu.data.sft_gen import TEMPLATES, generate_pairs, generate_pretraining_pairs, number_to_words

# Written by hand from Portuguese grammar, not from the implementation.
KNOWN_WORDS = {
    0: "zero", 1: "um", 10: "dez", 11: "onze", 14: "catorze", 16: "dezesseis", 20: "vinte",
    21: "vinte e um", 50: "cinquenta", 100: "cem", 101: "cento e um", 115: "cento e quinze",
    200: "duzentos", 500: "quinhentos", 999: "novecentos e noventa e nove", 1000: "mil",
    1001: "mil e um", 1100: "mil e cem", 1200: "mil e duzentos",
    1234: "mil duzentos e trinta e quatro", 2001: "dois mil e um",
    2024: "dois mil e vinte e quatro", 100_000: "cem mil", 101_000: "cento e um mil",
    1_000_000: "um milhão", 1_000_100: "um milhão e cem", 1_200_000: "um milhão e duzentos mil",
    2_000_000: "dois milhões", 2_000_001: "dois milhões e um",
    1_234_567: "um milhão duzentos e trinta e quatro mil quinhentos e sessenta e sete",
}

WORD_VALUES = {
    "zero": 0, "um": 1, "dois": 2, "três": 3, "quatro": 4, "cinco": 5, "seis": 6, "sete": 7,
    "oito": 8, "nove": 9, "dez": 10, "onze": 11, "doze": 12, "treze": 13, "catorze": 14,
    "quinze": 15, "dezesseis": 16, "dezessete": 17, "dezoito": 18, "dezenove": 19,
    "vinte": 20, "trinta": 30, "quarenta": 40, "cinquenta": 50, "sessenta": 60,
    "setenta": 70, "oitenta": 80, "noventa": 90, "cem": 100, "cento": 100, "duzentos": 200,
    "trezentos": 300, "quatrocentos": 400, "quinhentos": 500, "seiscentos": 600,
    "setecentos": 700, "oitocentos": 800, "novecentos": 900,
}
MULTIPLIERS = {"mil": 1000, "milhão": 10**6, "milhões": 10**6,
               "bilhão": 10**9, "bilhões": 10**9}
MONTHS = {"janeiro": 1, "fevereiro": 2, "março": 3, "abril": 4, "maio": 5, "junho": 6,
          "julho": 7, "agosto": 8, "setembro": 9, "outubro": 10, "novembro": 11, "dezembro": 12}
MONTH_NAMES = {number: name for name, number in MONTHS.items()}
WEEKDAY_BY_ISO = {1: "segunda-feira", 2: "terça-feira", 3: "quarta-feira", 4: "quinta-feira",
                  5: "sexta-feira", 6: "sábado", 7: "domingo"}
ORDINALS = ["primeiro", "segundo", "terceiro", "quarto", "quinto", "sexto", "sétimo", "oitavo",
            "nono", "décimo", "décimo primeiro", "décimo segundo"]
DATE = r"(\d{1,2}) de (\w+) de (\d{4})"


def words_to_number(text: str) -> int:
    """Naive reading of Portuguese cardinal words, independent of number_to_words."""
    total = current = 0
    for word in text.split():
        if word == "e":
            continue
        if word in MULTIPLIERS:
            total += (current or 1) * MULTIPLIERS[word]
            current = 0
        else:
            current += WORD_VALUES[word]
    return total + current


def parse_date(text: str) -> dt.date:
    day, month, year = re.fullmatch(DATE, text).groups()
    return dt.date(int(year), MONTHS[month], int(day))


def expected_response(pair: dict) -> str:
    """The right answer, recomputed from the prompt alone."""
    prompt, task = pair["prompt"], pair["task"]
    numbers = [int(x) for x in re.findall(r"\d+", prompt)]
    if task == "arithmetic":
        a, op, b = re.search(r"(\d+) (mais|menos|vezes) (\d+)", prompt).groups()
        a, b = int(a), int(b)
        return str({"mais": a + b, "menos": a - b, "vezes": a * b}[op])
    if task == "number_words":
        (n,) = numbers
        return pair["response"] if words_to_number(pair["response"]) == n else f"not {n}"
    if task == "words_number":
        words = [w for w in re.findall(r"[a-zçãõéêíóú]+", prompt)
                 if w in WORD_VALUES or w in MULTIPLIERS or w == "e"]
        return str(words_to_number(" ".join(words)))
    if task == "compare":
        a, b = numbers
        return str(max(a, b) if "maior" in prompt else min(a, b))
    if task == "month":
        for index, ordinal in reversed(list(enumerate(ORDINALS))):
            if f" {ordinal} " in prompt:
                return MONTH_NAMES[index + 1]
        (name,) = [m for m in MONTHS if re.search(rf"\b{m}\b", prompt)]
        step = 1 if "depois" in prompt else -1
        return MONTH_NAMES[(MONTHS[name] - 1 + step) % 12 + 1]
    if task == "small_number_words":
        (n,) = numbers
        assert n < 100
        return pair["response"] if words_to_number(pair["response"]) == n else f"not {n}"
    if task == "copy":
        return prompt.split(": ", 1)[1]
    if task == "date_words":
        day, month, year = map(int, re.search(r"(\d+)/(\d+)/(\d+)", prompt).groups())
        return f"{day} de {MONTH_NAMES[month]} de {year}"
    day = parse_date(re.search(DATE, prompt).group(0))
    if task == "weekday":
        return WEEKDAY_BY_ISO[day.isoweekday()]
    if task == "next_day":
        moved = day + dt.timedelta(days=1)
    elif task == "previous_day":
        moved = day - dt.timedelta(days=1)
    elif task == "days_later":
        offset = int(re.search(r"(\d+) dias", prompt).group(1))
        moved = day + dt.timedelta(days=offset)
    else:
        raise AssertionError(f"no independent check for task {task!r}")
    return f"{moved.day} de {MONTH_NAMES[moved.month]} de {moved.year}"


# --- sft_gen -------------------------------------------------------------------------------

@pytest.mark.parametrize("number,words", sorted(KNOWN_WORDS.items()))
def test_number_to_words_known_values(number, words):
    assert number_to_words(number) == words


def test_number_to_words_reads_back_over_every_magnitude():
    offsets = (-1, 0, 1, 99, 100, 7000)
    samples = list(range(0, 2100)) + [10**k + d for k in range(3, 12) for d in offsets]
    for n in samples:
        assert words_to_number(number_to_words(n)) == n, n


def test_number_to_words_rejects_out_of_range():
    with pytest.raises(ValueError, match="exceeds"):
        number_to_words(10**12)
    with pytest.raises(TypeError):
        number_to_words(1.5)


def test_every_generated_answer_is_right_by_independent_computation():
    pairs = generate_pairs(3000, seed=7)
    tasks = {pair["task"] for pair in pairs}
    assert tasks >= {"arithmetic", "number_words", "words_number", "next_day", "previous_day",
                     "days_later", "weekday", "month", "compare"}
    for pair in pairs:
        assert pair["response"] == expected_response(pair), pair
        assert 0 < len(pair["response"]) <= 200


def test_the_rules_mix_answers_are_right_by_independent_computation_and_carry_their_answer():
    pairs = generate_pairs(3000, seed=7, mix="rules")
    assert {pair["task"] for pair in pairs} == {"copy", "date_words", "small_number_words"}
    assert sum(p["task"] == "small_number_words" for p in pairs) == 100  # its whole question space, once each
    for pair in pairs:
        assert pair["response"] == pair["answer"] == expected_response(pair), pair
        wrong = " e um" if pair["task"] == "small_number_words" else " x"  # one more: the check can fail
        corrupted = dict(pair, response=pair["response"] + wrong)
        assert corrupted["response"] != expected_response(corrupted)
    # the default mix is the demo's, unchanged but for the answer each pair now carries
    assert generate_pairs(300, seed=7) == generate_pairs(300, seed=7, mix="demo")
    assert all(p["answer"] == p["response"] for p in generate_pairs(300, seed=7))
    with pytest.raises(ValueError, match="task mix 'nope'"):
        generate_pairs(3, seed=0, mix="nope")


def test_the_checker_rejects_wrong_answers():
    # the check above must be able to fail: corrupt each kind of answer and see it caught
    pairs = {pair["task"]: pair for pair in generate_pairs(400, seed=3)}
    wrong = {"arithmetic": lambda r: str(int(r) + 1), "compare": lambda r: str(int(r) + 1),
             "words_number": lambda r: str(int(r) + 1),
             "number_words": lambda r: r.replace("um", "dois", 1) if "um" in r else r + " e um",
             "weekday": lambda r: "domingo" if r != "domingo" else "sábado",
             "month": lambda r: "maio" if r != "maio" else "junho"}
    for task in ("next_day", "previous_day", "days_later"):
        wrong[task] = lambda r: re.sub(r"^\d+", lambda m: str(int(m.group()) % 28 + 1), r)
    for task, pair in pairs.items():
        corrupted = dict(pair, response=wrong[task](pair["response"]))
        assert corrupted["response"] != pair["response"]
        assert corrupted["response"] != expected_response(corrupted), task


def test_generate_pairs_deterministic_distinct_and_varied():
    first, again, other = generate_pairs(500, 1), generate_pairs(500, 1), generate_pairs(500, 2)
    assert first == again
    assert first != other
    assert len({pair["prompt"] for pair in first}) == 500
    arithmetic_shapes = {re.sub(r"\d+", "N", p["prompt"]).replace("mais", "OP")
                         .replace("menos", "OP").replace("vezes", "OP")
                         for p in first if p["task"] == "arithmetic"}
    assert len(arithmetic_shapes) >= 3  # several phrasings, not one template


def _shape(prompt: str) -> str:
    """A prompt with its operands masked: the template it was phrased from."""
    return re.sub(r"\d+|\b(mais|menos|vezes|maior|menor)\b", "X", prompt)


def _question(pair: dict) -> tuple:
    """What a pair asks, whatever its phrasing: its task, its operands and its answer."""
    operand = re.compile(r"\d+|maior|menor|mais|menos|vezes|" + "|".join(MONTHS))
    task, operands = pair["task"].removeprefix("pretrain_"), operand.findall(pair["prompt"])
    return task, tuple(sorted(operands) if task == "compare" else operands), pair["response"]


def test_pretraining_pairs_ask_the_sft_tasks_in_other_phrasings_and_other_questions():
    sft = generate_pairs(3000, seed=0)
    pretrain = generate_pretraining_pairs(2000, seed=0, after=3000)
    assert pretrain == generate_pretraining_pairs(2000, seed=0, after=3000) != generate_pretraining_pairs(2000, seed=1, after=3000)
    # the same tasks (a months question space of 36 is used up by the SFT pairs first)
    assert {p["task"].removeprefix("pretrain_") for p in pretrain} <= {p["task"] for p in sft}
    assert len({p["task"] for p in pretrain}) >= 7
    # no question twice across both lists, even phrased otherwise
    assert not {_question(p) for p in sft} & {_question(p) for p in pretrain}
    # the template sets are disjoint, and each list uses only its own
    for task, styles in TEMPLATES.items():
        assert not set(styles["sft"]) & set(styles["pretrain"]), task
    assert not {_shape(p["prompt"]) for p in sft} & {_shape(p["prompt"]) for p in pretrain}
    # answers are computed the same way: a pretraining number_words answer spells its number
    for pair in pretrain:
        if pair["task"] == "pretrain_number_words":
            assert pair["response"] == number_to_words(int(re.search(r"\d+", pair["prompt"]).group()))
    with pytest.raises(ValueError, match="non-negative int"):
        generate_pretraining_pairs(-1, seed=0, after=10)


# --- decoding and extraction ---------------------------------------------------------------

def test_decode_lines_falls_back_and_counts_dropped():
    raw = ("ação\n".encode() + "informação\n".encode("latin-1")
           + b"bell\x07\n" + b"_\x08_\x08ok\n")
    lines, dropped = demo_text.decode_lines(raw, "latin-1")
    assert lines == ["ação", "informação", "ok", ""]
    assert dropped == 1


def test_focalinux_documents_keep_prose_only():
    lines = ["1.1. Título", "-----------", "", "     Use o comando `ls' para listar",
             "     os arquivos do _diretório_ atual.", "", "ls -la /etc", "",
             "     20.1. dpkg 20.1.1. Pacotes 20.1.2. Instalar pacotes"]
    assert demo_text.focalinux_documents(lines) == [
        "Use o comando ls para listar os arquivos do diretório atual."]


def test_fortune_documents_split_on_percent():
    lines = ["Primeira linha", "segunda linha.", "", "%", "  x", "%", "Outra frase qualquer aqui."]
    assert demo_text.fortune_documents(lines) == ["Primeira linha\nsegunda linha.",
                                             "Outra frase qualquer aqui."]


def test_missing_packages_without_root_name_the_command(monkeypatch):
    monkeypatch.setattr(demo, "missing_demo_packages", lambda: ["fortunes-br"])
    monkeypatch.setattr(packages, "missing_demo_packages", lambda: ["fortunes-br"])
    monkeypatch.setattr(packages.os, "geteuid", lambda: 1000)
    with pytest.raises(demo.DemoPackagesError, match="apt-get install -y fortunes-br"):
        packages.ensure_demo_packages()


# --- the demo files (tiny scale) ----------------------------------------------------------

FILES = ["pt_corpus.txt", "en_corpus.txt", "sft_train.jsonl", "sft_held.jsonl", "chat_pretrain.jsonl", "pt_val.txt",
         "en_ruler.txt", "pt_words.txt", "sources.json"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    try:
        packages.ensure_demo_packages()
    except demo.DemoPackagesError as error:
        cannot_run(f"demo packages unavailable: {error}")  # CI runs as root: there they must install
    dirs = {name: tmp_path_factory.mktemp(name) for name in ("a", "a_again", "b")}
    demo.build_demo_sources(dirs["a"], seed=0, scale="tiny")
    demo.build_demo_sources(dirs["a_again"], seed=0, scale="tiny")
    demo.build_demo_sources(dirs["b"], seed=1, scale="tiny")
    return dirs


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_all_files_written_as_utf8(built):
    for name in FILES:
        raw = (built["a"] / name).read_bytes()
        assert raw, name
        for number, line in enumerate(raw.split(b"\n"), 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                pytest.fail(f"{name}:{number}: not UTF-8 ({error})")
            assert b"\r" not in line, f"{name}:{number}"


def test_eval_sets_have_recorded_sizes(built):
    record = json.loads((built["a"] / "sources.json").read_text())
    sizes = demo.SCALES["tiny"]
    for name, requested in (("pt_val.txt", sizes.pt_val_lines),
                            ("en_ruler.txt", sizes.en_ruler_lines)):
        lines = _lines(built["a"] / name)
        assert len(lines) == record["files"][name]["lines"]
        assert record["files"][name]["lines_requested"] == requested
        # the sources cover the tiny sizes; a shortfall would be recorded, never silent
        assert len(lines) == requested
        assert all(sizes.eval_min_chars <= len(line) <= sizes.eval_max_chars for line in lines)
        assert len(set(lines)) == len(lines)
    held = _lines(built["a"] / "sft_held.jsonl")
    train = _lines(built["a"] / "sft_train.jsonl")
    assert (len(held), len(train)) == (sizes.sft_held_pairs, sizes.sft_train_pairs)
    for name in ("pt_corpus.txt", "en_corpus.txt"):
        text = (built["a"] / name).read_text(encoding="utf-8")
        assert len(text.strip().split("\n\n")) == record["files"][name]["documents"]
        assert len(text) <= {"pt_corpus.txt": sizes.pt_corpus_max_chars,
                             "en_corpus.txt": sizes.en_corpus_max_chars}[name]
    assert len(_lines(built["a"] / "pt_words.txt")) == record["files"]["pt_words.txt"]["words"]


def test_eval_lines_never_in_training_text(built):
    pairs = (("pt_val.txt", "pt_corpus.txt"), ("en_ruler.txt", "en_corpus.txt"))
    for eval_name, corpus_name in pairs:
        eval_lines = set(_lines(built["a"] / eval_name))
        corpus = (built["a"] / corpus_name).read_text(encoding="utf-8")
        corpus_lines = {line.strip() for line in corpus.splitlines()}
        corpus_documents = {" ".join(doc.split()) for doc in corpus.split("\n\n")}
        assert not eval_lines & corpus_lines
        assert not eval_lines & corpus_documents
        flat_corpus = " ".join(corpus.split())
        assert not [line for line in eval_lines if line in flat_corpus]


def test_sft_files_parse_and_are_disjoint(built):
    prompts = {}
    for name in ("sft_train.jsonl", "sft_held.jsonl"):
        rows = [json.loads(line) for line in _lines(built["a"] / name)]
        assert all(row["prompt"].strip() and row["response"].strip() for row in rows)
        prompts[name] = {row["prompt"] for row in rows}
    assert not prompts["sft_train.jsonl"] & prompts["sft_held.jsonl"]
    chat = [json.loads(line) for line in _lines(built["a"] / "chat_pretrain.jsonl")]
    assert len(chat) == demo.SCALES["tiny"].chat_pretrain_pairs
    assert all(row["task"].startswith("pretrain_") for row in chat)
    assert not {row["prompt"] for row in chat} & (prompts["sft_train.jsonl"] | prompts["sft_held.jsonl"])
    # nor the same question in another phrasing: the built files continue the SFT pairs' stream
    sft_rows = [json.loads(line) for name in ("sft_train.jsonl", "sft_held.jsonl") for line in _lines(built["a"] / name)]
    assert not {_question(row) for row in chat} & {_question(row) for row in sft_rows}


def test_same_seed_same_bytes_other_seed_differs(built):
    for name in FILES:
        assert (built["a"] / name).read_bytes() == (built["a_again"] / name).read_bytes(), name
    for name in ("pt_corpus.txt", "pt_val.txt", "en_ruler.txt", "sft_held.jsonl"):
        assert (built["a"] / name).read_bytes() != (built["b"] / name).read_bytes(), name


def test_sources_json_names_packages_and_paths(built):
    record = json.loads((built["a"] / "sources.json").read_text())
    assert record["seed"] == 0 and record["scale"] == "tiny"
    assert set(record["packages"]) == set(demo.DEMO_PACKAGES)
    assert all(record["packages"].values())
    packages_used = {source["package"] for name in ("pt_corpus.txt", "en_corpus.txt")
                     for source in record["files"][name]["sources"]}
    assert {"focalinux-text", "fortunes-br", "fortunes"} <= packages_used
    for name in ("pt_corpus.txt", "en_corpus.txt"):
        sources = record["files"][name]["sources"]
        assert sum(s["documents_in_train"] for s in sources) == record["files"][name]["documents"]


def test_unknown_scale_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="scale='huge'"):
        demo.build_demo_sources(tmp_path, scale="huge")


def test_the_held_out_domain_is_read_by_no_training_source_and_the_tasks_check_out(built):
    from tatu.data.tasks import read_items

    faq = _lines(built["a"] / demo.HELD_OUT_FILE)
    record = json.loads((built["a"] / "sources.json").read_text())
    assert len(faq) == record["files"][demo.HELD_OUT_FILE]["lines"] == demo.SCALES["tiny"].held_out_lines
    training = (built["a"] / "pt_corpus.txt").read_text(encoding="utf-8") + (built["a"] / "en_corpus.txt").read_text(encoding="utf-8")
    assert not [line for line in faq if line in training]
    pt_val, en_ruler = set(_lines(built["a"] / "pt_val.txt")), set(_lines(built["a"] / "en_ruler.txt"))
    expected = {"language": {"português": pt_val, "inglês": en_ruler},
                "source": {"FAQ do Debian": set(faq), "guia ou provérbio": pt_val}}
    for kind in ("numbers", "dates", "arith", "language", "source"):
        items = read_items(built["a"] / f"task_{kind}.jsonl")
        assert len(items) == demo.SCALES["tiny"].task_items
        for _, item in items:
            if kind in expected:  # the answer is the list the line came from
                line = item["context"].removeprefix("Frase: ").rsplit("\n", 1)[0]
                assert line in expected[kind][item["choices"][item["answer"]]]


def test_a_task_is_copied_as_the_bytes_its_manifest_hash_covers(tmp_path):
    import hashlib

    from tatu.data.manifest import DataError
    from tatu.data.task_gen import generate_task
    from tatu.data.tasks import copy_tasks

    source = tmp_path / "numbers.jsonl"
    source.write_text("".join(json.dumps(i, ensure_ascii=False) + "\n" for i in generate_task("numbers", 5, 0)),
                      encoding="utf-8")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    (tmp_path / "ok").mkdir()
    entry = copy_tasks({"numbers": str(source)}, tmp_path / "ok", {str(source): digest})["numbers"]
    assert entry["items"] == 5 and entry["sha256"] == digest
    assert (tmp_path / "ok" / entry["file"]).read_bytes() == source.read_bytes()
    # a file that changed after it was hashed is refused, naming it, not copied under the old hash
    (tmp_path / "late").mkdir()
    with pytest.raises(DataError, match=r"numbers.jsonl: its sha256 is not the manifest.s: the task changed while"):
        copy_tasks({"numbers": str(source)}, tmp_path / "late", {str(source): "0" * 64})
