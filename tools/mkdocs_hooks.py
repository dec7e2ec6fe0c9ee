"""The docs site's MkDocs hooks (`hooks:` in mkdocs.yml): the repository's own documents are pages of the site, and
a link or an anchor means the same on the site as on GitHub, where the same Markdown is read.

* The README is the site's home page; ARCHITECTURE.md, RELIABILITY.md, BENCHMARKS.md and the TypeScript client's
  README are pages too (`ROOT_PAGES`), read where they are: nothing is copied into docs/.
* A relative link is resolved as GitHub resolves it, from the file's place in the repository, then pointed at the
  page that file is on the site. A link to another file of the repository (a source file, the Makefile) has no
  page: on the site it shows as its text. A link to nothing is left as it is, so `mkdocs build --strict` fails.
* Headings get GitHub's anchors (lowercased, punctuation other than `-` and `_` dropped, each space a `-`), so
  `page.md#a-heading` leads to the same heading in both places.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

DOCS = "docs"  # the pages' folder in the repository (a test builds from a copy elsewhere, as if it were here)
ROOT_PAGES = {
    "README.md": "index.md",
    "ARCHITECTURE.md": "ARCHITECTURE.md",
    "RELIABILITY.md": "RELIABILITY.md",
    "BENCHMARKS.md": "BENCHMARKS.md",
    "clients/typescript/README.md": "typescript-client.md",
}
IN_REPOSITORY = {page: path for path, page in ROOT_PAGES.items()}

LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]\n]*)\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def github_slug(value: str, separator: str = "-") -> str:
    """A heading's anchor as GitHub makes it (`separator` is Python-Markdown's, and GitHub's is always `-`)."""
    return re.sub(r"[^\w\- ]", "", value.strip().lower()).replace(" ", "-")


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    config.mdx_configs.setdefault("toc", {})["slugify"] = github_slug
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    root = _root(config)
    for path, page in ROOT_PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(root / path)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    root = _root(config)
    page_uri = page.file.src_uri
    here = IN_REPOSITORY.get(page_uri, f"{DOCS}/{page_uri}")
    lines = markdown.split("\n")
    fenced = False
    for number, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and "](" in line:
            lines[number] = LINK.sub(lambda link: _relink(link, here, page_uri, root), line)
    return "\n".join(lines)


def _root(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).parent


def _relink(link: re.Match[str], here: str, page_uri: str, root: Path) -> str:
    target = link["target"]
    if SCHEME.match(target) or target.startswith(("#", "/")):
        return link[0]
    path, hash_mark, anchor = target.partition("#")
    in_repository = posixpath.normpath(posixpath.join(posixpath.dirname(here), path))
    if in_repository in ROOT_PAGES:
        on_site = ROOT_PAGES[in_repository]
    elif in_repository.startswith(f"{DOCS}/"):
        on_site = in_repository.removeprefix(f"{DOCS}/")  # a page or a file of docs/: MkDocs checks it is there
    elif not in_repository.startswith("../") and (root / in_repository).exists():
        return link["text"]  # a file of the repository that is no page of the site
    else:
        return link[0]  # nothing there: MkDocs reports it
    relative = posixpath.relpath(on_site, posixpath.dirname(page_uri) or ".")
    return f"{link['bang']}[{link['text']}]({relative}{hash_mark}{anchor})"
