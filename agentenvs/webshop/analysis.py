"""Anserini's ``DefaultEnglishAnalyzer`` (Lucene 9) in Python: the text analysis of WebShop search.

WebShop indexes its products with Pyserini/Anserini's default analyzer and searches with the
same one. Its chain is::

    StandardTokenizer -> EnglishPossessiveFilter -> LowerCaseFilter -> StopFilter
    -> PorterStemFilter

* :func:`tokenize` is Lucene's ``StandardTokenizer``: Unicode UAX#29 word boundaries as Lucene's
  JFlex grammar states them (letters and digits glue into one token: ``3.5mm``, ``e.g``,
  ``material:solid``, ``1,000``; apostrophes and ``:`` between letters do not break a word;
  ideographs and hiragana are single-character tokens; emoji sequences are tokens). The grammar is
  run over a string of character-class codes with the ``regex`` module's POSIX (leftmost-longest)
  matching, which is JFlex's longest-match rule. Character classes come from the Unicode
  Word_Break, Line_Break, Script and Emoji properties.
* the possessive filter drops a trailing ``'s`` (also with ``’`` or ``＇``);
* stop words are Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (33 words);
* stemming is :func:`~agentenvs.webshop.porter.porter_stem` (Lucene's Porter stemmer).

Known limits: character properties come from the Unicode version of the installed ``regex``
module, Lucene 9 uses Unicode 9 (word breaks) and Emoji 11; they differ only for characters added
or re-classified since, none of which occur in the WebShop data. Tokens longer than 255 characters
(Lucene skips them) are skipped too.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache

import regex

from agentenvs.webshop.emoji_data import (
    EMOJI,
    EMOJI_MODIFIER,
    EMOJI_MODIFIER_BASE,
    EXTENDED_PICTOGRAPHIC,
    in_ranges,
)
from agentenvs.webshop.porter import porter_stem

__all__ = ["STOP_WORDS", "analyze", "tokenize", "tokenize_longest"]

STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)
MAX_TOKEN_LENGTH = 255

# ----- character classes --------------------------------------------------------------------
# One code letter per character; the token grammar below is written over these codes.
#   A letter (WB ALetter)     H Hebrew letter        G Hangul letter     K Katakana
#   N digit (WB Numeric)      E ExtendNumLet ("_")   M MidLetter (":")   U MidNum (",", ";")
#   Q MidNumLet (".", "’")    S Single_Quote ("'")   D Double_Quote
#   x Extend/Format/ZWJ       z ZWJ                  v U+FE0F            w U+FE0E
#   P emoji character         F emoji modifier       B emoji modifier base (also an emoji char)
#   R regional indicator      C keycap base "#" "*"  k U+20E3 keycap     t emoji tag spec, T tag end
#   I Han ideograph           J Hiragana             X complex context (Thai, Lao, ...)
#   . anything else (a break)

_WORD_PROPS = [
    (regex.compile(r"\p{WB=ZWJ}"), "z"),
    (regex.compile(r"[\uFE0F]"), "v"),
    (regex.compile(r"[\uFE0E]"), "w"),
    (regex.compile(r"[\u20E3]"), "k"),
    (regex.compile(r"[\U000E0020-\U000E007E]"), "t"),
    (regex.compile(r"[\U000E007F]"), "T"),
    (regex.compile(r"\p{WB=Regional_Indicator}"), "R"),
    (regex.compile(r"[#*]"), "C"),
    (regex.compile(r"[\p{WB=Extend}\p{WB=Format}]"), "x"),
    (regex.compile(r"\p{WB=Hebrew_Letter}"), "H"),
    (regex.compile(r"[\p{Script=Hangul}&&\p{WB=ALetter}]", regex.V1), "G"),
    (regex.compile(r"\p{WB=ALetter}"), "A"),
    (regex.compile(r"[\p{WB=Numeric}[\p{Block=HalfAndFullForms}&&\p{Nd}]]", regex.V1), "N"),
    (regex.compile(r"\p{WB=Katakana}"), "K"),
    (regex.compile(r"\p{WB=MidLetter}"), "M"),
    (regex.compile(r"\p{WB=MidNum}"), "U"),
    (regex.compile(r"\p{WB=MidNumLet}"), "Q"),
    (regex.compile(r"\p{WB=Single_Quote}"), "S"),
    (regex.compile(r"\p{WB=Double_Quote}"), "D"),
    (regex.compile(r"\p{WB=ExtendNumLet}"), "E"),
    (regex.compile(r"\p{Script=Han}"), "I"),
    (regex.compile(r"\p{Script=Hiragana}"), "J"),
    (regex.compile(r"\p{LB=Complex_Context}"), "X"),
]
# not emoji tokens although \p{Emoji}: keycap bases, (c) (R) TM, U+3030, U+303D ("RKAM")
_ACCIDENTAL_EMOJI = frozenset("0123456789#*\u00a9\u00ae\u2122\u3030\u303d")


def _emoji_class(ch: str) -> str:
    if in_ranges(ch, EMOJI_MODIFIER):
        return "F"
    if in_ranges(ch, EMOJI_MODIFIER_BASE):
        return "B"
    if in_ranges(ch, EXTENDED_PICTOGRAPHIC):
        return "P"
    if in_ranges(ch, EMOJI) and ch not in _ACCIDENTAL_EMOJI:
        return "P"
    return "."


@cache
def _char_class(ch: str) -> str:
    for pattern, code in _WORD_PROPS:
        if pattern.match(ch):
            return code
    return _emoji_class(ch)


_ASCII_CLASSES = "".join(_char_class(chr(i)) for i in range(128))


def _classes(text: str) -> str:
    if text.isascii():
        return text.translate(_ASCII_TABLE)
    return "".join(_char_class(ch) for ch in text)


_ASCII_TABLE = {i: _ASCII_CLASSES[i] for i in range(128)}

# ----- the token grammar (Lucene's StandardTokenizerImpl.jflex over class codes) ------------
_X = "[xzvwk]*"  # WB4: Extend, Format and ZWJ attach to the character before them
_XS = "[xzk]*"  # the same without the presentation selectors U+FE0E, U+FE0F
_AH = f"[AHG]{_X}"
_NUM = f"N{_X}"
_KAT = f"K{_X}"
_ENL = f"E{_X}"
_MIDL = f"[MQS]{_X}"
_MIDN = f"[UQS]{_X}"
_HEB = f"H{_X}"
_SQ = f"S{_X}"
_DQ = f"D{_X}"
_CHAIN = (
    f"(?:{_KAT}(?:(?:{_ENL})*{_KAT})*"
    f"|(?:{_HEB}(?:{_SQ}|{_DQ}{_HEB})"
    f"|{_NUM}(?:(?:(?:{_ENL})*|{_MIDN}){_NUM})*"
    f"|{_AH}(?:(?:(?:{_ENL})*|{_MIDL}){_AH})*)+)"
)
_WORD = f"(?:{_ENL})*{_CHAIN}(?:(?:{_ENL})+{_CHAIN})*(?:{_ENL})*"


def _grammar(emoji_ext: str) -> str:
    """The token grammar; ``emoji_ext`` is WB4's extension run after an emoji character."""
    emoji_char = f"[PB]{emoji_ext}"
    unit = f"(?:z*{emoji_char}v?|(?:z*B{emoji_ext})?F{emoji_ext})"
    emoji = f"(?:{unit}(?:(?:z{unit})*|t+T)|[NC]{emoji_ext}v?k{emoji_ext}|R{_X}R{_X})"
    return f"(?:{_WORD}|{emoji}|(?:G{_X})+|(?:X{_X})+|I{_X}|J{_X})"


# JFlex takes the longest match at each position; the regex module's POSIX mode does too, but
# slowly. Python's backtracking regex finds the same tokens once a ZWJ between two emoji is not
# swallowed by the first one's extension run (the lookahead) and the word rule comes first,
# except around Hebrew letters (WB7a-c) and emoji tag sequences, where we use the POSIX matcher;
# the test suite checks the two agree.
_TOKEN_LONGEST = regex.compile("(?p)" + _grammar(_XS))
_TOKEN = re.compile(_grammar("(?:[xk]|z(?![PBF]))*"))
# the same grammar over ASCII text itself (no emoji, no extend characters, no Hebrew)
_ASCII_CHAIN = "(?:[0-9](?:(?:_*|[,;.'])[0-9])*|[A-Za-z](?:(?:_*|[:.'])[A-Za-z])*)+"
_ASCII_TOKEN = re.compile(f"_*{_ASCII_CHAIN}(?:_+{_ASCII_CHAIN})*_*")


def tokenize(text: str) -> list[str]:
    """Lucene ``StandardTokenizer`` tokens of ``text`` (original case)."""
    if text.isascii():
        return [t for t in _ASCII_TOKEN.findall(text) if len(t) <= MAX_TOKEN_LENGTH]
    codes = _classes(text)
    matcher = _TOKEN_LONGEST if ("H" in codes or "t" in codes) else _TOKEN
    return [
        text[m.start() : m.end()]
        for m in matcher.finditer(codes)
        if m.end() - m.start() <= MAX_TOKEN_LENGTH
    ]


def tokenize_longest(text: str) -> list[str]:
    """:func:`tokenize` by literal leftmost-longest matching (slow; the reference for tests)."""
    codes = _classes(text)
    return [
        text[m.start() : m.end()]
        for m in _TOKEN_LONGEST.finditer(codes)
        if m.end() - m.start() <= MAX_TOKEN_LENGTH
    ]


def _drop_possessive(token: str) -> str:
    if len(token) >= 2 and token[-1] in "sS" and token[-2] in "'\u2019\uff07":
        return token[:-2]
    return token


def _lower(token: str) -> str:
    # Java's Character.toLowerCase is the simple (one-to-one) mapping; Python's lower() is the
    # full one and differs only for U+0130, which Java maps to a plain "i".
    return token.replace("\u0130", "i").lower() if "\u0130" in token else token.lower()


@lru_cache(maxsize=100_000)
def _term(token: str) -> str | None:
    term = _lower(_drop_possessive(token))
    if term in STOP_WORDS:
        return None
    return porter_stem(term)


def analyze(text: str) -> list[str]:
    """The index terms of ``text``, in order, as Anserini's default English analyzer makes them."""
    terms = []
    for token in tokenize(text):
        term = _term(token)
        if term is not None:
            terms.append(term)
    return terms
