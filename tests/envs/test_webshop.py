"""WebShop-v0: Lucene ranking parity, analyzer, reward, goals, pages, expert and the contract."""

from __future__ import annotations

import gzip
import json
import os
import pickle
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentenvs
from agentenvs.checker import check_contract, fuzz_actions, rollout_in_subprocess
from agentenvs.core import MatchStatus, UnknownSplitError, UnknownTaskError
from agentenvs.webshop import WebShopEnv, default_catalog, parse_action, parse_fields
from agentenvs.webshop.analysis import analyze, tokenize, tokenize_longest
from agentenvs.webshop.expert import WebShopExpert
from agentenvs.webshop.pages import html_to_text
from agentenvs.webshop.porter import porter_stem
from agentenvs.webshop.reward import (
    normalize_color,
    option_matches,
    purchase_reward,
    token_set_ratio,
    type_reward,
)
from agentenvs.webshop.search import BM25Index, byte4_to_int, int_to_byte4

DATA = Path(__file__).resolve().parent / "data"


def _original(relative: str) -> Path | None:
    """A published file of the original benchmark under ``$AGENTENVS_ORIGINALS`` (a folder that
    some machines have; never part of the repository), or None."""
    root = os.environ.get("AGENTENVS_ORIGINALS")
    path = Path(root) / relative if root else None
    return path if path is not None and path.exists() else None


SHARED_GOLD = _original("webshop/lucene_gold_1k.json")  # Lucene's rankings, 1,076 queries


def _gold_queries() -> list[tuple[str, list[str]]]:
    """Lucene's real rankings: the whole gold file where present, else the packaged sample."""
    if SHARED_GOLD is not None:
        queries = json.loads(SHARED_GOLD.read_text())["queries"]
        return [(q["query"], q["top50"]) for q in queries]
    queries = json.loads((DATA / "webshop_lucene_sample.json").read_text())["queries"]
    return [(q["query"], q["top10"]) for q in queries]


def _conformance() -> list[dict]:
    with gzip.open(DATA / "webshop_conformance.json.gz", "rt") as f:
        return json.load(f)["episodes"]


# ----- search: Lucene parity ------------------------------------------------------------------


def test_ranking_reproduces_lucene_top10_and_top50():
    catalog = default_catalog()
    gold = _gold_queries()  # top 50 (fewer when fewer match) or, for the sample, top 10
    top10 = top_all = 0
    for query, expected in gold:
        got = catalog.search(query, 50 if SHARED_GOLD is not None else 10)
        top10 += got[:10] == expected[:10]
        top_all += got == expected
    assert top10 / len(gold) >= 0.99, f"exact top-10 for {top10}/{len(gold)} queries"
    assert top_all / len(gold) >= 0.99, f"exact lists for {top_all}/{len(gold)} queries"


def test_scores_match_lucene_to_four_decimals():
    if SHARED_GOLD is None:
        pytest.skip("Lucene's gold scores are not on this machine ($AGENTENVS_ORIGINALS)")
    index = default_catalog().index
    for q in json.loads(SHARED_GOLD.read_text())["queries"][::7]:
        hits = index.search(q["query"], 50)
        assert [round(h.score, 4) for h in hits] == q["scores"], q["query"]


def test_length_norm_is_lucenes_lossy_byte():
    assert [int_to_byte4(n) for n in (0, 1, 23, 24, 25)] == [0, 1, 23, 24, 25]
    # 100 - 24 = 76 = 0b1001100: 4 significant bits kept -> 0b1001 << 3 = 72, + 24 = 96
    assert byte4_to_int(int_to_byte4(100)) == 96
    assert byte4_to_int(int_to_byte4(103)) == 96 and byte4_to_int(int_to_byte4(104)) == 104
    assert all(byte4_to_int(int_to_byte4(n)) <= n for n in range(5000))


def test_bm25_by_hand():
    index = BM25Index(["b", "a", "c"], ["red shoe", "red red hat", "blue sock"])
    # N = 3 documents of 2, 3 and 2 terms: avgdl = 7/3; "red" is in 2: idf = ln(1 + 1.5 / 2.5)
    f32 = np.float32
    idf, avgdl = f32(np.log(1 + 1.5 / 2.5)), f32(7 / 3)

    def tf_part(tf: int, dl: int) -> np.float32:  # Lucene: w - w / (1 + tf / norm), in float32
        norm_inverse = f32(1) / (f32(0.9) * ((f32(1) - f32(0.4)) + f32(0.4) * f32(dl) / avgdl))
        return idf - idf / (f32(1) + f32(tf) * norm_inverse)

    one, two = tf_part(1, 2), tf_part(2, 3)
    hits = index.search("Red")
    assert [h.doc_id for h in hits] == ["a", "b"]
    assert hits[0].score == float(two) and hits[1].score == float(one)
    # ties go to the smaller id; stop words and unknown terms match nothing
    tie = BM25Index(["z", "y"], ["cat", "cat"])
    assert [h.doc_id for h in tie.search("cat")] == ["y", "z"]
    assert index.search("the and zebra") == []


# ----- analyzer -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("3.5mm jack, 1,000 pcs", ["3.5mm", "jack", "1,000", "pcs"]),
        ("Material:SOLID WOOD", ["Material:SOLID", "WOOD"]),
        ("e.g. U.S.A. wi-fi", ["e.g", "U.S.A", "wi", "fi"]),
        ("women's don't a_b _x", ["women's", "don't", "a_b", "_x"]),
        ("2.5x3.5 a.1 b08x", ["2.5x3.5", "a", "1", "b08x"]),
        ("★★ love❤️ ™ ©", ["★", "★", "love", "❤️", "™", "©"]),
        ("巴食品 カタカナ abcひら", ["巴", "食", "品", "カタカナ", "abc", "ひ", "ら"]),
    ],
)
def test_standard_tokenizer(text, tokens):
    assert tokenize(text) == tokens
    assert tokenize_longest(text) == tokens


def test_fast_tokenizer_equals_longest_match_grammar():
    import random

    rng = random.Random(3)
    alphabet = "aZ19_:.'\",;#*&-/ x\u05d0\u30a2\uac00\u4e00\u3042\u0e01\u0301\u200d\ufe0f\u20e3"
    alphabet += "\U0001f468\U0001f3fb\U0001f1e6\U000e0020\U000e007f\u2764\u2605"
    for _ in range(3000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 14)))
        assert tokenize(s) == tokenize_longest(s), repr(s)


def test_analyzer_possessive_stop_words_and_porter():
    assert analyze("The women's shoes, it's for running!") == ["women", "shoe", "run"]
    assert analyze("The IS and") == []
    # Lucene's Porter stemmer (reference C/Java release), not the published paper's
    cases = {
        "caresses": "caress",
        "ponies": "poni",
        "agreed": "agre",
        "hopping": "hop",
        "relational": "relat",
        "sensibiliti": "sensibl",
        "analogousli": "analog",
        "apologies": "apolog",
        "adjustment": "adjust",
        "feed": "feed",
        "sky": "sky",
        "ion": "ion",
        "oed": "o",
        "hi": "hi",
        "conformabli": "conform",
    }
    assert {w: porter_stem(w) for w in cases} == cases


# ----- goals ------------------------------------------------------------------------------------


def test_goals_are_webshops_in_webshops_order():
    catalog = default_catalog()
    goals = catalog.goals
    assert len(goals) == 6910
    published = json.loads((DATA / "webshop_published_goals.json").read_text())["instructions"]
    assert [g.instruction_text for g in goals[:14]] == published
    for g in goals:
        price = catalog.prices[g.asin]
        above = [10.0 * i for i in range(1, 100) if 10.0 * i > price][:4]
        assert g.price_upper in (above[1:] if len(above) >= 2 else [1_000_000])
        assert list(g.goal_options) == sorted(g.goal_options)
        assert 0 < g.weight <= 1
    env = WebShopEnv()
    assert env.task_ids("test") == [f"synthetic/{i}" for i in range(500)]
    assert len(env.task_ids("train")) == 6410 and env.task_ids("train")[0] == "synthetic/500"
    assert env.family("synthetic/1") == "fashion"
    with pytest.raises(UnknownTaskError, match="synthetic/<0-6909>"):
        env.reset(options={"task_id": "synthetic/6910"})
    with pytest.raises(UnknownSplitError):
        env.task_ids("eval")


# ----- reward -----------------------------------------------------------------------------------


def test_fuzzy_matching_is_thefuzz_019():
    assert token_set_ratio("Tea Tree", "tea tree oil") == 100  # one token set inside the other
    assert token_set_ratio("black", "('color', 'black')") == 100  # a tuple compares as str()
    assert token_set_ratio("long lasting", "long-lasting") == 100
    assert token_set_ratio("easy clean", "easy to clean") == 100
    # no shared token: difflib ratio of the sorted strings, rounded
    assert token_set_ratio("cotton", "cottons") == 92
    assert token_set_ratio("", "x") == 0


def test_option_matching_keeps_webshops_bug_and_can_fix_it():
    assert normalize_color("dark chocolate brown") == "brown"  # first in COLOR_SET order
    assert normalize_color("rectangular") == "tan"
    # fuzzy token sets: a chosen "small" matches a wanted "x-small" ("x small" holds "small")
    assert option_matches({"size": "small"}, {"size": "x-small"}, "webshop") == 1
    # WebShop compares the chosen value with str(("color", "black")) ...
    assert option_matches({"color": "black"}, {"color": "black"}, "webshop") == 1
    # the right shape chosen, but "rectangular" normalises to "tan" on the chosen side only
    goal = {"item shape": "rectangular"}
    assert option_matches(goal, goal, "webshop") == 0 and option_matches(goal, goal, "fixed") == 1
    assert option_matches(goal, goal) == 0  # the default is WebShop's check
    with pytest.raises(ValueError, match="'webshop' or 'fixed'"):
        option_matches(goal, goal, "strict")


def test_type_reward_thresholds():
    a = {"query": "q1", "product_category": "A › B › C"}
    b = {"query": "q2", "product_category": "A › X › Y"}
    assert type_reward(a, a, ["shoe"], ["shoe"])["r_type"] == 1.0
    assert type_reward(a, b, ["x", "shoe"], ["shoe", "red"])["r_type"] == 1.0  # 0.5 > 0.2
    five = ["n1", "n2", "n3", "n4", "n5"]
    assert type_reward(a, b, ["n1"], five)["r_type"] == 0.5  # 0.2: no match of any kind
    tenth = type_reward(a, b, ["n1"], five * 2)  # shared nouns / listed nouns = 1/10
    assert tenth["title_score"] == 0.1 and tenth["r_type"] == 0.5
    assert type_reward(a, b, ["n1"], ["n1"] + ["m"] * 10)["r_type"] == 0.1  # 1/11 < 0.1
    assert type_reward(a, a, ["z"], five)["r_type"] == 0.0  # no shared noun at all
    assert type_reward(a, b, ["z"], [])["title_score"] == 0.2  # no goal nouns


def test_purchase_reward_by_hand():
    product = {
        "query": "shorts",
        "product_category": "Clothing › Women › Shorts",
        "Title": "Yoga Shorts",
        "BulletPoints": ["High waist, tummy control"],
        "Description": "",
        "Attributes": ["butt lifting", "light weight"],
    }
    goal = {
        "query": "shorts",
        "product_category": "Clothing › Women › Shorts",
        "attributes": ["butt lifting", "tummy control", "quick drying"],
        "price_upper": 30.0,
        "goal_options": {"color": "black", "size": "3x-large"},
    }
    nouns = ["yoga", "shorts"]
    # attributes: fuzzy (butt lifting) + substring of the features (tummy control) = 2 of 3
    # options: black matches, medium does not; price 13.99 <= 30: (2 + 1 + 1) / (3 + 2 + 1)
    got = purchase_reward(product, goal, 13.99, {"color": "black", "size": "medium"}, nouns, nouns)
    assert got.attribute_matches == 2 and got.option_matches == 1 and got.price_ok
    assert got.reward == pytest.approx(4 / 6)
    too_dear = purchase_reward(product, goal, 31.0, {}, nouns, nouns)
    assert too_dear.reward == pytest.approx(2 / 6)


def test_reward_equals_webshops_on_recorded_purchases():
    """400 purchases scored by WebShop's own get_reward (thefuzz 0.19, spaCy 3.8 sm), under the
    default option matching (WebShop's option check)."""
    catalog = default_catalog()
    cases = json.loads((DATA / "webshop_reward_cases.json").read_text())["cases"]
    for case in cases:
        goal = catalog.goals[case["goal"]]
        got = purchase_reward(
            catalog.by_asin[case["asin"]],
            goal.as_dict(),
            catalog.prices[case["asin"]],
            case["options"],
            catalog.nouns(case["asin"]),
            catalog.nouns(goal.asin),
            option_matching="webshop",
        )
        assert got.reward == pytest.approx(case["reward"], abs=1e-12), case


# ----- pages: conformance with WebShop's text environment -------------------------------------


def test_observations_equal_webshops_text_environment():
    """Episodes recorded from WebShop's text env (verl-agent templates, Flask, bs4)."""
    env = WebShopEnv(max_turns=100)
    html_env = WebShopEnv(max_turns=100, observation_mode="html")
    for episode in _conformance():
        task_id = f"synthetic/{episode['task']}"
        obs, _ = env.reset(options={"task_id": task_id})
        html, _ = html_env.reset(options={"task_id": task_id})
        assert obs == episode["reset"]
        assert html_to_text(html) == obs
        for step in episode["steps"]:
            obs, reward, terminated, _, info = env.step(step["action"])
            html = html_env.step(step["action"])[0]
            available = step["available"]
            expected = (["search[<your query>]"] if available["has_search_bar"] else []) + [
                f"click[{c}]" for c in available["clickables"]
            ]
            assert obs == step["observation"], step["action"]
            assert html_to_text(html) == obs
            assert reward == pytest.approx(step["reward"], abs=1e-12)
            assert terminated == step["done"]
            assert info["admissible_actions"] == expected


def test_pages_of_a_fixed_product():
    env = WebShopEnv()
    env.reset(options={"task_id": "synthetic/1"})
    obs = env.step(f"search[{EPISODE[0][7:-1]}]")[0]
    assert " [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B09QCP4579 [SEP] " in obs
    obs = env.step("click[B09QCP4579]")[0]
    assert obs.endswith(
        "[SEP] Back to Search [SEP] < Prev [SEP] color [SEP] black [SEP] blue [SEP] gray"
        " [SEP] purple [SEP] wine [SEP] size [SEP] small [SEP] medium [SEP] large [SEP] x-large"
        " [SEP] xx-large"
        " [SEP] 3x-large [SEP] LWLW High Waist Yoga Shorts for Women,Tummy Control Biker Shorts"
        " Exercise Workout Butt Lifting Tights Women's Short Pants [SEP] Price: $13.99"
        " [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )
    assert env.step("click[reviews]")[0].endswith("[SEP] Back to Search [SEP] < Prev")
    assert env.session_view().page == "detail"


def test_special_searches_and_paging():
    env = WebShopEnv()
    env.reset(options={"task_id": "synthetic/0"})
    obs, _, _, _, info = env.step("search[<c> grocery]")
    assert "Page 1 (Total results: 117)" in obs and info["fields"]["total"] == 117
    obs, _, _, _, info = env.step("search[<q> hall trees]")
    assert info["fields"]["total"] == len(info["fields"]["asins"]) > 0
    env.step("search[<r>]")
    first = env.session_view().results
    assert len(first) == 50 and len(set(first)) == 50
    env.step("search[leggings]")
    for _ in range(5):
        env.step("click[next >]")
    assert env.observation.endswith("[SEP] Page 6 (Total results: 48) [SEP] < Prev [SEP] Next >")
    assert env.session_view().page_asins == ()


# ----- fields, match ----------------------------------------------------------------------------


def test_fields_and_match():
    env = WebShopEnv()
    obs0, info = env.reset(options={"task_id": "synthetic/3"})
    assert info["fields"] == {"page": "search", "instruction": env.goal().instruction_text}
    obs1, _, _, _, info = env.step("search[streaming media players]")
    assert info["fields"]["page"] == "results" and info["fields"]["page_number"] == 1
    assert len(info["fields"]["asins"]) == 10 and info["query"] == "streaming media players"
    target = info["fields"]["asins"][0]
    obs2, _, _, _, info = env.step(f"click[{target.lower()}]")
    assert info["fields"]["page"] == "item" and info["fields"]["asin"] == target
    assert info["asin"] == target and info["price"] == default_catalog().prices[target]
    assert env.match(obs1, obs1).status is MatchStatus.MATCH
    result = env.match(obs1, obs2)
    assert result.status is MatchStatus.MISMATCH and "page" in result.differing
    assert env.match("x", "x").status is MatchStatus.MATCH
    html_env = WebShopEnv(observation_mode="html")
    html_env.reset(options={"task_id": "synthetic/3"})
    html_env.step("search[streaming media players]")
    html = html_env.step(f"click[{target.lower()}]")[0]
    fields = parse_fields(html)
    assert fields["asin"] == target and fields["query"] == "streaming media players"


def test_parse_action_is_webshops():
    assert parse_action("search[red shoes]") == ("search", "red shoes")
    assert parse_action("click[a[b]]") == ("click[a", "b]")
    assert parse_action("search[x] trailing") == ("search", "x")
    assert parse_action("click[]") == ("click[]", None)


# ----- expert -----------------------------------------------------------------------------------


def _play_expert(env: WebShopEnv, task_id: str) -> tuple[float, bool, int]:
    expert = WebShopExpert()
    env.reset(options={"task_id": task_id})
    reward = 0.0
    while not env.done:
        reward, info = env.step(expert.act(env).action)[1::3]
        assert info["valid"]
    return reward, env.won, env.turn


def test_expert_on_the_test_split():
    env = WebShopEnv(option_matching="fixed")  # the correction: every goal can score 1
    results = [_play_expert(env, t) for t in env.task_ids("test")]
    assert sum(w for _, w, _ in results) == 500
    assert max(t for _, _, t in results) <= 15
    # the default, WebShop's option check: 20 of the 500 goals cannot score 1, even bought exactly
    parity = WebShopEnv()
    assert parity.variant == {"option_matching": "webshop"} and env.variant != parity.variant
    results = [_play_expert(parity, t) for t in parity.task_ids("test")]
    assert sum(w for _, w, _ in results) == 480
    assert np.mean([r for r, _, _ in results]) > 0.99


def test_expert_recovers_from_a_wrong_product():
    env = WebShopEnv()
    env.reset(options={"task_id": "synthetic/5"})
    env.step("search[dress shirts]")
    wrong = [a for a in env.session_view().page_asins if a != env.goal().asin][0]
    env.step(f"click[{wrong.lower()}]")
    env.step("click[features]")
    expert = WebShopExpert()
    while not env.done:
        env.step(expert.act(env).action)
    assert env.won


# ----- the contract -----------------------------------------------------------------------------

EPISODE = [
    "search[find me butt lifting, light weight women's shorts with high waist, tummy control]",
    "click[next >]",
    "click[< prev]",
    "click[b09qcp4579]",
    "click[black]",
    "click[features]",
    "click[< prev]",
    "click[3x-large]",
    "click[buy now]",
]


def test_contract_snapshot_and_replay():
    check_contract(WebShopEnv(), "synthetic/1", EPISODE, split="test")
    env = WebShopEnv()
    env.reset(options={"task_id": "synthetic/1"})
    for action in EPISODE[:5]:
        env.step(action)
    snap = pickle.loads(pickle.dumps(env.snapshot()))
    fresh = WebShopEnv()
    fresh.restore(snap)
    assert fresh.session_view() == env.session_view()
    assert fresh.step("click[3x-large]") == env.step("click[3x-large]")


def test_random_search_is_in_the_snapshot():
    env = WebShopEnv()
    env.reset(options={"task_id": "synthetic/9"})
    env.step("search[<r>]")
    snap = env.snapshot()
    expected = env.step("search[<r>]")[0]
    fresh = WebShopEnv()
    fresh.restore(snap)
    assert fresh.step("search[<r>]")[0] == expected


def test_same_actions_same_observations_across_processes():
    actions = EPISODE + []
    a = rollout_in_subprocess("WebShop-v0", "synthetic/1", actions, hash_seed="0")
    b = rollout_in_subprocess("WebShop-v0", "synthetic/1", actions, hash_seed="12345")
    assert a == b
    env = WebShopEnv()
    obs, _ = env.reset(options={"task_id": "synthetic/1"})
    here = [obs] + [env.step(x)[0] for x in actions]
    assert [step[0] for step in a] == here
    assert a[-1][1] == 1.0 and a[-1][4]["won"] is True


def test_fuzz_actions_never_raise():
    env = WebShopEnv(max_turns=10**6)
    env.reset(options={"task_id": "synthetic/2"})
    env.step("search[wall art]")
    for action in fuzz_actions(seed=5, n=600, extra_pieces=["search[", "click[", "next >", "<r>"]):
        before = env.observation
        obs, reward, terminated, truncated, info = env.step(action)
        if not info["valid"]:
            assert obs == before and reward == 0.0
        if terminated or truncated:
            env.reset(options={"task_id": "synthetic/2"})
    for bad in ["click[buy now]", "click[nothing]", "click[search]", "search[]", "", "[]"]:
        env.reset(options={"task_id": "synthetic/2"})
        obs, reward, _, _, info = env.step(bad)
        assert not info["valid"] and obs == env.observation and reward == 0.0


def test_gymnasium_registration_and_check_env():
    env = gym.make("WebShop-v0")
    assert isinstance(env, WebShopEnv) and "WebShop-v0" in agentenvs.ENVIRONMENTS
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert info["task_id"] in env.task_ids("train")
    with pytest.raises(ValueError, match="observation_mode"):
        WebShopEnv(observation_mode="pixels")
