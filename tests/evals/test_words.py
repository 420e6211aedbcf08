"""The invented-word ruler, checked in both directions on a synthetic Portuguese-like corpus."""

import json
import random

import pytest

from tatu.evals.words import Dictionary, InventedWords, invented_rate, words

# ~300 real Portuguese words, most frequent first (the sampling gives them Zipf frequencies).
VOCABULARY = """
de a o que e do da em um para é com não uma os no se na por mais as dos como mas foi ao ele
das tem à seu sua ou ser quando muito há nos já está eu também só pelo pela até isso ela
entre era depois sem mesmo aos ter seus quem nas me esse eles estão você tinha foram essa
num nem suas meu às minha têm numa pelos elas havia seja qual será nós tenho lhe deles
essas esses pelas este fosse dele tu te vocês vos lhes meus minhas teu tua nosso nossa
casa tempo ano dia vida homem mulher coisa país cidade mundo trabalho água pão mãe pai
filho filha irmão irmã avó avô coração ação nação canção razão mão chão irmãos cães pães
árvore pássaro música médico polícia família história época página último único rápido
fácil difícil possível português português-brasileiro lâmpada câmara ônibus açúcar
café manhã amanhã hoje ontem noite tarde semana mês escola professor aluno livro caderno
janela porta mesa cadeira cama cozinha banheiro quarto sala jardim rua estrada ponte rio
mar praia montanha floresta campo fazenda vila bairro centro mercado loja feira igreja
guarda-chuva beija-flor segunda-feira terça-feira couve-flor bem-vindo arco-íris
para-brisa porta-voz cachorro-quente pé-de-moleque caixa-d'água olho-d'água estrela-d'alva
d'água disse-lhe dá-me fazê-lo vê-la diz-se sabe-se
falar comer beber dormir andar correr pensar saber querer poder dizer fazer ver dar ir vir
sair entrar chegar partir ficar voltar abrir fechar ler escrever ouvir sentir pedir
gostar amar viver morrer nascer crescer aprender ensinar comprar vender pagar ganhar perder
bonito feio grande pequeno novo velho bom mau alto baixo forte fraco quente frio claro
escuro cheio vazio rico pobre feliz triste cansado doente limpo sujo caro barato longe perto
azul verde vermelho amarelo branco preto cinzento rosa laranja marrom
sempre nunca ainda agora aqui ali lá onde porque então assim bem mal cedo logo devagar
depressa sobre sob após durante contra desde perante
informação educação situação população organização produção condição relação posição
questão opinião atenção solução função televisão decisão região estação lição
saúde país juízo baú caíram saída egoísta ciúme reúne
pôr têm vêm lêem crêem voô avós você pôde
"""

WORD_LIST = list(dict.fromkeys(VOCABULARY.split()))
LETTERS = "abcdefghijlmnopqrstuvxzáàâãéêíóôõúç"


def zipf_sampler(rng, vocabulary):
    weights = [1.0 / rank for rank in range(1, len(vocabulary) + 1)]
    return lambda k: rng.choices(vocabulary, weights=weights, k=k)


def synthetic_texts(seed, n_sentences, typo_rate=0.0):
    """Sentences with capitals, punctuation and numbers; optional one-off typos (as in a
    real corpus, where they must not reach the dictionary)."""
    rng = random.Random(seed)
    sample = zipf_sampler(rng, WORD_LIST)
    texts, typos = [], []
    for _ in range(n_sentences):
        tokens = sample(rng.randint(5, 15))
        if rng.random() < typo_rate:
            typo = "".join(rng.choices(LETTERS, k=rng.randint(5, 9)))
            typos.append(typo)
            tokens.insert(rng.randrange(len(tokens)), typo)
        if rng.random() < 0.2:
            tokens.insert(rng.randrange(len(tokens)), str(rng.randint(1, 2024)))
        sentence = " ".join(tokens)
        if rng.random() < 0.3:
            cut = sentence.find(" ", len(sentence) // 2)
            if cut > 0:
                sentence = sentence[:cut] + "," + sentence[cut:]
        texts.append(sentence[0].upper() + sentence[1:] + rng.choice([".", "!", "?", "..."]))
    return texts, typos


@pytest.fixture(scope="module")
def corpus_dictionary():
    texts, typos = synthetic_texts(seed=1, n_sentences=4000, typo_rate=0.05)
    return Dictionary.build(texts, min_count=3), typos


def test_vocabulary_is_a_real_test_set():
    assert len(WORD_LIST) >= 300
    assert any("-" in w for w in WORD_LIST) and any("'" in w for w in WORD_LIST)
    assert sum(any(ch in "áàâãéêíóôõúç" for ch in w) for w in WORD_LIST) >= 60
    assert all(words(w) == [w] for w in WORD_LIST)  # each list entry is exactly one word


def test_dictionary_holds_the_corpus_words_and_drops_one_off_typos(corpus_dictionary):
    dictionary, typos = corpus_dictionary
    assert all(w in dictionary for w in WORD_LIST)
    assert len(typos) > 100
    assert not any(t in dictionary for t in typos)
    assert len(dictionary) == len(WORD_LIST)
    assert dictionary.n_distinct_seen > len(dictionary)


def test_held_out_real_text_passes(corpus_dictionary):
    dictionary, _ = corpus_dictionary
    held_out, _ = synthetic_texts(seed=2, n_sentences=500)
    result = invented_rate(held_out, dictionary)
    assert result.n_words > 4000
    assert result.rate <= 0.01  # at least 99% of real held-out words pass


def test_random_letter_strings_are_caught(corpus_dictionary):
    dictionary, _ = corpus_dictionary
    rng = random.Random(3)
    invented = ["".join(rng.choices(LETTERS, k=rng.randint(4, 10))) for _ in range(500)]
    result = invented_rate([" ".join(invented)], dictionary)
    assert result.n_words == 500
    assert result.rate >= 0.95


def test_real_words_with_one_letter_substituted_are_caught(corpus_dictionary):
    dictionary, _ = corpus_dictionary
    rng = random.Random(4)
    mutated = []
    for word in WORD_LIST:
        positions = [i for i, ch in enumerate(word) if ch.isalpha()]
        i = rng.choice(positions)
        replacement = rng.choice([ch for ch in LETTERS if ch != word[i]])
        mutated.append(word[:i] + replacement + word[i + 1:])
    result = invented_rate(mutated, dictionary)
    assert result.n_words == len(mutated)
    assert result.rate >= 0.95


def test_min_count_is_respected():
    texts = ["raro raro comum comum comum"]
    assert "raro" not in Dictionary.build(texts, min_count=3)
    assert "comum" in Dictionary.build(texts, min_count=3)
    assert "raro" in Dictionary.build(texts, min_count=2)
    with pytest.raises(ValueError, match="min_count"):
        Dictionary.build(texts, min_count=0)


def test_case_folding_and_apostrophe_forms():
    dictionary = Dictionary.build(["Água água ÁGUA d’água D'água d'Água"], min_count=3)
    assert "água" in dictionary and "Água" in dictionary and "ÁGUA" in dictionary
    assert "d'água" in dictionary and "D’ÁGUA" in dictionary
    assert len(dictionary) == 2


def test_word_boundaries():
    assert words("Guarda-chuva, d'água e disse-lhe!") == [
        "guarda-chuva", "d'água", "e", "disse-lhe"]
    assert words("42 3,14 -- ... !? R2-D2 x² ½ foo_bar -bem- 'tá'") == [
        "r", "d", "x", "foo", "bar", "bem", "tá"]
    assert words("") == [] and words("123 456.") == []
    assert words("Ação") == words("Ac\u0327a\u0303o") == ["ação"]  # NFC and NFD alike


def test_invented_rate_counts_and_examples():
    dictionary = Dictionary.build(["casa casa casa azul azul azul"], min_count=3)
    result = invented_rate(["A casa azul, xyzzy casa plonk!", "Plonk 99 frobo"], dictionary)
    assert isinstance(result, InventedWords)
    # words: a casa azul xyzzy casa plonk | plonk frobo -> 8 words, "a" is not in this dictionary
    assert result.n_words == 8
    assert result.n_invented == 5
    assert result.rate == pytest.approx(5 / 8)
    assert result.examples == ["a", "xyzzy", "plonk", "frobo"]


def test_examples_are_capped_at_twenty():
    dictionary = Dictionary.build([], min_count=3)
    text = " ".join("palavra" + "abcdefghijklmnopqrstuvwxyz"[i] for i in range(26))
    result = invented_rate([text], dictionary)
    assert result.n_invented == 26 and len(result.examples) == 20


def test_no_words_gives_rate_zero_not_nan():
    dictionary = Dictionary.build(["casa casa casa"])
    result = invented_rate(["", "123 !!!"], dictionary)
    assert result == InventedWords(rate=0.0, n_words=0, n_invented=0, examples=[])


def test_a_single_string_is_refused():
    dictionary = Dictionary.build(["casa casa casa"])
    with pytest.raises(TypeError, match="not a single str"):
        invented_rate("casa", dictionary)
    with pytest.raises(TypeError, match="not a single str"):
        Dictionary.build("casa casa casa")


def test_save_and_load_round_trip(tmp_path, corpus_dictionary):
    dictionary, _ = corpus_dictionary
    path = tmp_path / "dict.json"
    dictionary.save(path)
    payload = json.loads(path.read_text(encoding="utf-8"))
    assert payload["min_count"] == 3 and payload["words"] == sorted(payload["words"])
    assert payload["sha256"] == dictionary.sha256()
    loaded = Dictionary.load(path)
    assert len(loaded) == len(dictionary) and loaded.min_count == 3
    assert all(w in loaded for w in WORD_LIST)
    assert loaded.sha256() == dictionary.sha256()


def test_load_refuses_an_altered_file(tmp_path):
    path = tmp_path / "dict.json"
    Dictionary.build(["casa casa casa mesa mesa mesa"]).save(path)
    payload = json.loads(path.read_text(encoding="utf-8"))
    payload["words"].append("xyzzy")
    path.write_text(json.dumps(payload), encoding="utf-8")
    with pytest.raises(ValueError, match="altered"):
        Dictionary.load(path)
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"dict.json:1"):
        Dictionary.load(path)
