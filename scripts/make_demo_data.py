#!/usr/bin/env python3
"""Regenerate the English -> German demo data bundled in ``langswap/demo/data``.

The bundle is built only from redistributable Debian packages (GPL, BSD-style
and public-domain texts), fetched with ``apt-get download`` and unpacked with
``dpkg-deb -x`` -- nothing is installed.  It therefore needs a Debian system
(tested on Debian 12 "bookworm") with ``apt-get``/``dpkg-deb`` and package
lists that can reach a Debian mirror; run it as root (or as a user that may run
``apt-get update`` if the package lists are missing).  Only the Python standard
library is used; the SWORD Bible module is decoded directly (no ``diatheke``).

Outputs (all UTF-8; everything but SOURCES.md gzip-compressed, mtime 0):

* ``de.train.txt.gz``   German text, one paragraph/item per line
* ``de.test.txt.gz``    300 held-out German lines (>= 200 chars) sharing no
                        word 8-gram with any other German line
* ``en.train.txt.gz``   English text, one paragraph/item per line
* ``en-de.dict.tsv.gz`` ``english<TAB>german`` single-word pairs (FreeDict)
* ``SOURCES.md``        provenance, licences, processing and counts

Usage::

    python3 scripts/make_demo_data.py [--out src/langswap/demo/data] [--work DIR]

The output is deterministic for fixed package versions (those used for the
committed files are listed in ``EXPECTED_VERSIONS``; a warning is printed when
the mirror serves different ones).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import html
import io
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unicodedata
import zlib
from html.parser import HTMLParser
from pathlib import Path

# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------

EXPECTED_VERSIONS = {
    "fortunes-de": "0.35-1",
    "debian-reference-de": "2.100",
    "maint-guide-de": "1.2.53",
    "developers-reference-de": "12.18",
    "debian-edu-doc-de": "2.12.23~deb12u1",
    "libreoffice-help-de": "4:7.4.7-1+deb12u14",
    "fortunes": "1:1.99.1-7.3",
    "fortunes-min": "1:1.99.1-7.3",
    "sword-text-web": "426.0-1",
    "debian-reference-en": "2.100",
    "dict-freedict-eng-deu": "2022.04.21-1",
}

# Licence name as written in each package's /usr/share/doc/PKG/copyright
# (checked at run time: the string must occur in that file).
LICENCES = {
    "fortunes-de": "GPL-2+",
    "debian-reference-de": "GPL-2+",
    "maint-guide-de": "GPL-2.0+",
    "developers-reference-de": "GPL-2",
    "debian-edu-doc-de": "GPL-2+",
    "libreoffice-help-de": "MPL-2.0",
    "fortunes": "BSD copyright",
    "fortunes-min": "BSD copyright",
    "sword-text-web": "public-domain",
    "debian-reference-en": "GPL-2+",
    "dict-freedict-eng-deu": "GPL-3+",
}

# fortune files left out: ASCII art, a near-verbatim copy of a commercial book
# ("Der tiefere Sinn des Labenz"), song lyrics / novel quotes (third-party
# copyright doubts) and ethnic jokes.
FORTUNES_DE_SKIP = {"asciiart", "woerterbuch"}
FORTUNES_EN_SKIP = {"ascii-art", "songs-poems", "pratchett", "ethnic"}

MIN_CHARS = 20
TEST_LINES = 300
TEST_MIN_CHARS = 200
NGRAM = 8
SEED = 0

# Size budget (bytes of gzip output).  Sources are added in priority order and
# the lowest-priority source is truncated (after shuffling) to fit.
DE_TRAIN_BUDGET = 2_150_000  # before the test lines are taken out
EN_TRAIN_BUDGET = 1_850_000
DICT_BUDGET = 300_000
DICT_MAX_PER_HEADWORD = 4

DE_STOP = set(
    """der die das und ist nicht ich du er sie es wir ihr ein eine einen einem
    einer eines mit von zu den dem des auf für sich auch als wenn dass daß aber
    oder wie noch nur bei aus nach wird werden kann sind hat haben mir mich dir
    dich mein meine sein seine kein keine ihm ihn ihnen uns euch schon sehr
    immer hier dann doch jetzt oder über unter durch gegen ohne um zum zur vom
    beim ins diese dieser dieses wieder wer wo warum weil denn nichts etwas
    alle werden wurde wurden ist's gibt muss muß soll sollte könnte möchte
    habe hatte bin bist seid""".split()
)
EN_STOP = set(
    """the and is are of to that it for with on this be not you he she they we
    have has were but or as at by from which can if there their what all would
    my your his her its our them been being who whom when where why how than
    then these those some any no nor only other such into through about after
    before should could shall do does did done just very more most also""".split()
)
WORD_RE = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?")


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def log(*args: object) -> None:
    print(*args, file=sys.stderr, flush=True)


def norm(text: str) -> str:
    """NFC-normalise and collapse all whitespace to single spaces."""
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\u00ad", "")  # soft hyphen
    return " ".join(text.split())


def lang_score(line: str) -> tuple[int, int]:
    words = [w.lower() for w in WORD_RE.findall(line)]
    return sum(w in DE_STOP for w in words), sum(w in EN_STOP for w in words)


def letter_ratio(line: str) -> float:
    chars = [c for c in line if not c.isspace()]
    if not chars:
        return 0.0
    return sum(c.isalpha() for c in chars) / len(chars)


def keep_line(line: str, lang: str) -> bool:
    if len(line) < MIN_CHARS or letter_ratio(line) < 0.6:
        return False
    de, en = lang_score(line)
    if lang == "de":
        return de >= 1 and de > en
    return en >= 1 and en > de


def write_gz(path: Path, lines: list[str]) -> None:
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    with open(path, "wb") as raw:
        # mtime=0 and no file name -> byte-identical output on every run
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
            gz.write(data)


def gz_size(lines: list[str]) -> int:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write("".join(line + "\n" for line in lines).encode("utf-8"))
    return len(buf.getvalue())


def n_words(lines: list[str]) -> int:
    return sum(len(line.split()) for line in lines)


# --------------------------------------------------------------------------
# Fetching Debian packages
# --------------------------------------------------------------------------


def fetch(packages: list[str], work: Path) -> dict[str, tuple[str, Path]]:
    """Download and unpack ``packages``; return name -> (version, root dir)."""
    debs = work / "debs"
    debs.mkdir(parents=True, exist_ok=True)

    def download() -> subprocess.CompletedProcess:
        return subprocess.run(["apt-get", "download", *packages], cwd=debs,
                              capture_output=True, text=True)

    missing = [p for p in packages if not list(debs.glob(f"{p}_*.deb"))]
    if missing:
        res = download()
        if res.returncode != 0:
            log("apt-get download failed, running apt-get update once ...")
            subprocess.run(["apt-get", "update"], check=True, capture_output=True)
            res = download()
            if res.returncode != 0:
                sys.exit(f"apt-get download failed:\n{res.stderr}")
    out = {}
    for pkg in packages:
        matches = sorted(debs.glob(f"{pkg}_*.deb"))
        if not matches:
            sys.exit(f"no .deb for {pkg}")
        deb = matches[-1]
        version = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], check=True,
                                 capture_output=True, text=True).stdout.strip()
        if version != EXPECTED_VERSIONS[pkg]:
            log(f"WARNING: {pkg} {version} != expected {EXPECTED_VERSIONS[pkg]}; "
                "output will differ from the committed files")
        root = work / "x" / pkg
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        copyright_file = root / "usr/share/doc" / pkg / "copyright"
        text = copyright_file.read_text(encoding="utf-8", errors="replace")
        if LICENCES[pkg] not in text:
            sys.exit(f"licence {LICENCES[pkg]!r} not found in {copyright_file}; re-check licences")
        out[pkg] = (version, root)
    return out


# --------------------------------------------------------------------------
# Text extractors
# --------------------------------------------------------------------------


def read_fortunes(directory: Path, skip: set[str]) -> list[str]:
    """Items of every fortune file in ``directory`` (items separated by '%')."""
    items = []
    for path in sorted(directory.iterdir()):
        if path.is_symlink() or not path.is_file() or path.suffix in {".dat", ".u8"}:
            continue
        if path.name in skip:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for item in re.split(r"^%\s*$", text, flags=re.M):
            items.append(norm(item))
    return items


class _HTMLBlocks(HTMLParser):
    """Collect the text of block-level elements, skipping code and navigation."""

    BLOCK = {"p", "li", "dt", "dd", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6",
             "div", "title", "caption", "blockquote", "tr", "table", "ul", "ol", "dl",
             "section", "body", "figure", "figcaption"}
    SKIP_TAGS = {"pre", "script", "style", "head"}
    SKIP_CLASSES = {"related", "sphinxsidebar", "sphinxsidebarwrapper", "footer", "toc",
                    "navheader", "navfooter", "literallayout", "highlight",
                    "list-of-tables", "list-of-figures", "list-of-examples", "screen",
                    "programlisting"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self.buf: list[str] = []
        self.skip = 0
        self.stack: list[tuple[str, bool]] = []  # (tag, skipping) for skip-capable tags

    def _flush(self) -> None:
        if self.buf:
            self.blocks.append("".join(self.buf))
            self.buf = []

    def handle_starttag(self, tag, attrs):
        classes = set((dict(attrs).get("class") or "").split())
        skipping = tag in self.SKIP_TAGS or bool(classes & self.SKIP_CLASSES) or any(
            c.startswith("highlight") for c in classes)
        if tag in self.BLOCK or tag in self.SKIP_TAGS:
            self._flush()
        if tag in ("div", "pre", "script", "style", "head", "table", "section"):
            self.stack.append((tag, skipping))
            if skipping:
                self.skip += 1
        elif tag == "br":
            self.buf.append(" ")

    def handle_endtag(self, tag):
        if tag in self.BLOCK or tag in self.SKIP_TAGS:
            self._flush()
        if tag in ("div", "pre", "script", "style", "head", "table", "section"):
            # pop to the matching tag (tolerates sloppy nesting)
            while self.stack:
                t, skipping = self.stack.pop()
                if skipping:
                    self.skip -= 1
                if t == tag:
                    break

    def handle_data(self, data):
        if not self.skip:
            self.buf.append(data)

    def close(self):
        super().close()
        self._flush()


def read_html(paths: list[Path]) -> list[str]:
    items = []
    for path in paths:
        parser = _HTMLBlocks()
        parser.feed(path.read_text(encoding="utf-8", errors="replace"))
        parser.close()
        items.extend(norm(b) for b in parser.blocks)
    return items


def read_sword_ztext(module_dir: Path) -> list[str]:
    """Paragraphs of a SWORD zText (OSIS markup, zlib blocks) Bible module.

    File layout: ``*.bzs`` = block index (offset, size, uncompressed size:
    3 x uint32 LE); ``*.bzv`` = verse index (block, offset: uint32, size:
    uint16); ``*.bzz`` = zlib-compressed blocks.  Old Testament first.
    """
    verses = []
    for testament in ("ot", "nt"):
        bzs = (module_dir / f"{testament}.bzs").read_bytes()
        bzv = (module_dir / f"{testament}.bzv").read_bytes()
        bzz = (module_dir / f"{testament}.bzz").read_bytes()
        blocks = [struct.unpack_from("<III", bzs, i) for i in range(0, len(bzs), 12)]
        cache: dict[int, bytes] = {}
        for i in range(0, len(bzv) - 9, 10):
            b, off, size = struct.unpack_from("<IIH", bzv, i)
            if size == 0:
                continue
            if b not in cache:
                o, s, _ = blocks[b]
                cache = {b: zlib.decompress(bzz[o:o + s])}
            verses.append(cache[b][off:off + size].decode("utf-8", errors="replace"))
    osis = "\n".join(verses)
    osis = re.sub(r"<note\b.*?</note>", " ", osis, flags=re.S)
    osis = re.sub(r"<title\b.*?</title>", "\u2029", osis, flags=re.S)
    # paragraph / line-group / chapter / book starts become paragraph breaks
    osis = re.sub(r'<div\b[^>]*type="(?:x-p|paragraph|book)"[^>]*/>|<lg\b[^>]*sID[^>]*/>|'
                  r"<chapter\b[^>]*/>", "\u2029", osis)
    osis = re.sub(r"<[^>]+>", "", osis)
    osis = html.unescape(osis)
    return [norm(p) for p in osis.split("\u2029")]


# --------------------------------------------------------------------------
# Corpus assembly
# --------------------------------------------------------------------------


def clean(items: list[str], lang: str) -> list[str]:
    return [line for line in items if keep_line(line, lang)]


def dedup(lines: list[str], seen: set[str]) -> list[str]:
    out = []
    for line in lines:
        if line not in seen:
            seen.add(line)
            out.append(line)
    return out


def assemble(sources: list[tuple[str, list[str]]], budget: int) -> tuple[list[str], dict]:
    """Deduplicate and shuffle each source; add them in priority order, cutting
    the first source that does not fit, so that the final shuffled text is at
    most ``budget`` gzip bytes.  Returns the shuffled lines and per-source stats."""
    seen: set[str] = set()
    lines: list[str] = []
    stats = {}

    def mixed(extra: list[str]) -> list[str]:
        out = lines + extra
        random.Random(SEED).shuffle(out)
        return out

    for name, items in sources:
        uniq = dedup(items, seen)
        random.Random(SEED).shuffle(uniq)
        total = len(uniq)
        if gz_size(mixed(uniq)) > budget:
            lo, hi = 0, len(uniq)
            while lo < hi:  # largest prefix that fits
                mid = (lo + hi + 1) // 2
                if gz_size(mixed(uniq[:mid])) <= budget:
                    lo = mid
                else:
                    hi = mid - 1
            uniq = uniq[:lo]
        stats[name] = {"available": total, "used": len(uniq), "words": n_words(uniq)}
        lines += uniq
    return mixed([]), stats


def shingles(line: str) -> set[str]:
    toks = [t.lower() for t in re.findall(r"\w+", line)]
    return {" ".join(toks[i:i + NGRAM]) for i in range(max(0, len(toks) - NGRAM + 1))}


def split_test(lines: list[str]) -> tuple[list[str], list[str]]:
    """Pick TEST_LINES lines >= TEST_MIN_CHARS none of whose word 8-grams occurs
    in any other line; ``lines`` is already shuffled, so take the first ones."""
    counts: collections.Counter = collections.Counter()
    sh = [shingles(line) for line in lines]
    for s in sh:
        counts.update(s)
    test_idx = []
    for i, line in enumerate(lines):
        if len(line) >= TEST_MIN_CHARS and sh[i] and all(counts[g] == 1 for g in sh[i]):
            test_idx.append(i)
            if len(test_idx) == TEST_LINES:
                break
    if len(test_idx) < TEST_LINES:
        sys.exit(f"only {len(test_idx)} eligible test lines")
    chosen = set(test_idx)
    return [lines[i] for i in range(len(lines)) if i not in chosen], [lines[i] for i in test_idx]


# --------------------------------------------------------------------------
# Dictionary
# --------------------------------------------------------------------------

_B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}


def _b64(s: str) -> int:
    n = 0
    for c in s:
        n = n * 64 + _B64[c]
    return n


def _split_top(s: str) -> list[str]:
    """Split at commas/semicolons not inside (), [], {} or <>."""
    parts, depth, cur = [], 0, []
    for c in s:
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth = max(0, depth - 1)
        if c in ",;" and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


SINGLE_WORD = re.compile(r"^[^\W\d_](?:[^\W\d_]|[-'’.])*$")


def read_freedict(root: Path) -> list[tuple[str, str]]:
    """All single-word (english, german) pairs, in dictionary order."""
    base = root / "usr/share/dictd/freedict-eng-deu"
    data = gzip.open(f"{base}.dict.dz").read()  # dictzip is gzip-compatible
    offsets = set()
    for raw in open(f"{base}.index", encoding="utf-8"):
        parts = raw.rstrip("\n").split("\t")
        if len(parts) == 3:
            offsets.add((_b64(parts[1]), _b64(parts[2])))
    pairs = []
    for off, size in sorted(offsets):
        entry = data[off:off + size].decode("utf-8", errors="replace").split("\n")
        if len(entry) < 2 or entry[0].startswith("00-database") or entry[0].startswith("00database"):
            continue
        head = entry[0].split(" /")[0].split(" (")[0].split(" <")[0].strip()
        if not SINGLE_WORD.match(head) or head.endswith("."):
            continue
        trans_line = re.sub(r"\[[^\]]*\]", " ", entry[1])  # [domain] labels
        for cand in _split_top(trans_line):
            cand = re.sub(r"<[^>]*>|\([^)]*\)|\{[^}]*\}", " ", cand).strip()
            if SINGLE_WORD.match(cand) and not cand.endswith(".") and "…" not in cand:
                pairs.append((head, cand))
    return pairs


def build_dict(pairs, en_lines, de_lines, budget):
    """Select pairs useful for the demo corpora.

    English words must occur in ``en_lines``.  Per English word, German
    translations are ranked by frequency in ``de_lines`` (ties: dictionary
    order); translations absent from ``de_lines`` are used only when no
    translation occurs there; at most DICT_MAX_PER_HEADWORD per English word.
    Rows are ordered by English frequency and cut to ``budget`` gzip bytes."""
    def freq(lines):
        c = collections.Counter()
        for line in lines:
            c.update(WORD_RE.findall(line))
        return c

    en_f, de_f = freq(en_lines), freq(de_lines)
    by_head: dict[str, list[str]] = {}
    for en, de in pairs:
        if en_f[en] >= 1:
            lst = by_head.setdefault(en, [])
            if de not in lst:
                lst.append(de)
    rows = []
    for en in sorted(by_head, key=lambda w: (-en_f[w], w)):
        cands = by_head[en]
        ranked = sorted(range(len(cands)), key=lambda i: (-de_f[cands[i]], i))
        chosen = [cands[i] for i in ranked]
        if de_f[chosen[0]] > 0:
            chosen = [w for w in chosen if de_f[w] > 0]
        rows.extend(f"{en}\t{de}" for de in chosen[:DICT_MAX_PER_HEADWORD])
    if gz_size(rows) > budget:
        lo, hi = 0, len(rows)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if gz_size(rows[:mid]) <= budget:
                lo = mid
            else:
                hi = mid - 1
        rows = rows[:lo]
    return rows, {"all_single_word_pairs": len(set(pairs)),
                  "headwords": len({r.split("\t")[0] for r in rows})}


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def main() -> None:
    repo = Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=repo / "src/langswap/demo/data")
    ap.add_argument("--work", type=Path, default=None,
                    help="scratch dir for .deb files (default: a temporary dir)")
    args = ap.parse_args()

    tmp = None
    work = args.work
    if work is None:
        tmp = tempfile.TemporaryDirectory(prefix="langswap-demo-")
        work = Path(tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)

    pk = fetch(list(EXPECTED_VERSIONS), work)
    R = {name: root for name, (_, root) in pk.items()}

    # ---- German ---------------------------------------------------------
    log("German text ...")
    de_sources = [
        ("fortunes-de", clean(read_fortunes(R["fortunes-de"] / "usr/share/games/fortunes/de",
                                            FORTUNES_DE_SKIP), "de")),
        ("debian-reference-de", clean(read_html(sorted(
            (R["debian-reference-de"] / "usr/share/debian-reference").glob("*.de.html"))), "de")),
        ("debian-edu-doc-de", clean(read_html([
            R["debian-edu-doc-de"] / "usr/share/doc/debian-edu-doc-de/debian-edu-bookworm-manual.html"]),
            "de")),
        ("maint-guide-de", clean(read_html(sorted(
            (R["maint-guide-de"] / "usr/share/doc/maint-guide-de/html").glob("*.de.html"))), "de")),
        ("developers-reference-de", clean(read_html([
            R["developers-reference-de"] / "usr/share/developers-reference/de/developers-reference.html"]),
            "de")),
        ("libreoffice-help-de", clean(read_html(sorted(
            (R["libreoffice-help-de"] / "usr/share/libreoffice/help/de").rglob("*.html"))), "de")),
    ]
    de_all, de_stats = assemble(de_sources, DE_TRAIN_BUDGET)
    de_train, de_test = split_test(de_all)

    # ---- English --------------------------------------------------------
    log("English text ...")
    en_sources = [
        ("fortunes", clean(read_fortunes(R["fortunes"] / "usr/share/games/fortunes",
                                         FORTUNES_EN_SKIP), "en")),
        ("fortunes-min", clean(read_fortunes(R["fortunes-min"] / "usr/share/games/fortunes",
                                             FORTUNES_EN_SKIP), "en")),
        ("debian-reference-en", clean(read_html(sorted(
            (R["debian-reference-en"] / "usr/share/debian-reference").glob("*.en.html"))), "en")),
        ("sword-text-web", clean(read_sword_ztext(
            R["sword-text-web"] / "usr/share/sword/modules/texts/ztext/engWEB2015eb"), "en")),
    ]
    en_train, en_stats = assemble(en_sources, EN_TRAIN_BUDGET)

    # ---- Dictionary -----------------------------------------------------
    log("dictionary ...")
    pairs = read_freedict(R["dict-freedict-eng-deu"])
    dict_rows, dict_stats = build_dict(pairs, en_train, de_train, DICT_BUDGET)

    # ---- Write ----------------------------------------------------------
    files = {
        "de.train.txt.gz": de_train,
        "de.test.txt.gz": de_test,
        "en.train.txt.gz": en_train,
        "en-de.dict.tsv.gz": dict_rows,
    }
    for name, lines in files.items():
        write_gz(args.out / name, lines)
    write_sources(args.out, pk, files, de_stats, en_stats, dict_stats)
    for name in list(files) + ["SOURCES.md"]:
        p = args.out / name
        log(f"{name}: {p.stat().st_size} bytes")
    if tmp is not None:
        tmp.cleanup()


def write_sources(out: Path, pk, files, de_stats, en_stats, dict_stats) -> None:
    def v(p):
        return pk[p][0]

    def fstats(name):
        lines = files[name]
        return (f"{(out / name).stat().st_size:,} bytes gzip, {len(lines):,} lines, "
                f"{n_words(lines):,} words, {sum(len(l) for l in lines):,} characters")

    def src_table(stats):
        rows = ["| package | version | licence | lines available | lines used | words used |",
                "|---|---|---|---|---|---|"]
        for p, s in stats.items():
            rows.append(f"| {p} | {v(p)} | {LICENCES[p]} | {s['available']:,} | {s['used']:,} | {s['words']:,} |")
        return "\n".join(rows)

    text = f"""# Demo data sources

Generated by `scripts/make_demo_data.py` (run from the repository root on
Debian 12 as root: `python3 scripts/make_demo_data.py`).  Every file below is
regenerated by that one command; the script downloads the listed Debian
packages with `apt-get download`, unpacks them with `dpkg-deb -x` and is
deterministic for the package versions given here.  Licence names are quoted
from each package's `/usr/share/doc/PACKAGE/copyright`; the full licence texts
are in `/usr/share/common-licenses/` on any Debian system.

Common processing for the text files: each paragraph (HTML block element,
fortune cookie, or Bible paragraph) becomes one line; Unicode NFC,
whitespace collapsed to single spaces; lines shorter than {MIN_CHARS} characters dropped;
lines whose non-space characters are less than 60% letters dropped (ASCII
art, commands, tables); a stop-word language check keeps only lines that look
like the target language; `<pre>` blocks, code listings and navigation are
skipped; exact duplicates removed; each source shuffled with
`random.Random({SEED})`; sources are added in the order listed and the last
one is cut to fit the size budget; the result is shuffled again with
`random.Random({SEED})`.

## de.train.txt.gz and de.test.txt.gz

- `de.train.txt.gz`: {fstats('de.train.txt.gz')}
- `de.test.txt.gz`: {fstats('de.test.txt.gz')}

{src_table(de_stats)}

The first {TEST_LINES} lines (in shuffled order) of at least {TEST_MIN_CHARS} characters
none of whose lower-cased word {NGRAM}-grams occurs in any other German line
form `de.test`; they are removed from `de.train`, so no test line or
near-duplicate of one (sharing any {NGRAM}-word sequence) is in the training text.

Left out of `fortunes-de`: {', '.join(sorted(FORTUNES_DE_SKIP))} (ASCII art; a
near-complete copy of the commercial book "Der tiefere Sinn des Labenz").
Only the bookworm manual of `debian-edu-doc-de` and the single-page HTML of
`developers-reference-de` are used (the rest duplicates them).

## en.train.txt.gz

- `en.train.txt.gz`: {fstats('en.train.txt.gz')}

{src_table(en_stats)}

Left out of `fortunes`: {', '.join(sorted(FORTUNES_EN_SKIP))} (ASCII art; song
lyrics and novel quotes whose third-party copyright is doubtful; ethnic jokes).
The World English Bible (`sword-text-web`, module engWEB2015eb) is decoded
directly from the SWORD zText files; footnotes and headings are removed and
OSIS paragraph/line-group/chapter marks give the line breaks.

## en-de.dict.tsv.gz

- `en-de.dict.tsv.gz`: {fstats('en-de.dict.tsv.gz')}; {dict_stats['headwords']:,} English headwords

Source: `dict-freedict-eng-deu` {v('dict-freedict-eng-deu')} (FreeDict English-German,
generated from the TU Chemnitz Ding dictionary), licence {LICENCES['dict-freedict-eng-deu']}.
The dictd file `freedict-eng-deu.dict.dz` was parsed; for every entry the
headword and the comma-separated translations on its first translation line
were taken, with grammar tags (`<...>`), domain labels (`[...]`) and
parenthesised remarks removed.  Only single-word pairs were kept (no spaces,
letters plus `-`, `'`, `.` inside, no abbreviations ending in `.`): {dict_stats['all_single_word_pairs']:,} distinct
pairs.  Of these, pairs where both words occur at least twice in
`en.train`/`de.train` were kept, at most {DICT_MAX_PER_HEADWORD} German words per English
word (most frequent in `de.train` first), ordered by English word frequency
in `en.train` and cut to the size budget.  Case is kept as in the dictionary.

## Licence notes

The bundle mixes GPL-2 (developers-reference-de), GPL-2+, GPL-3+ (the
dictionary), a BSD licence (fortunes) and public-domain text (World English
Bible; note that "World English Bible" is a trademark and modified text may
not carry that name -- here it is only reformatted and sampled).  The fortune
collections quote many third parties; Debian distributes them under the
package licences given above.
"""
    (out / "SOURCES.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
