"""A source named by a local directory or a Hugging Face hub id (``owner/name``): ``resolve_source`` gives the
directory (a hub id downloaded to the local cache), and where it cannot, says in one line what happened and what
to do (``hub_failure``), never the hub library's exception chain."""

from __future__ import annotations

from pathlib import Path

PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.bin"]  # what a conversion reads of a repository


def check_source_name(src: str | Path) -> None:
    """Refuse, before anything else is checked, a SRC that is neither an existing directory nor shaped like a hub id
    (``FileNotFoundError``; ``NotADirectoryError`` for a file)."""
    p = Path(src)
    if p.is_dir():
        return
    if p.exists():
        raise NotADirectoryError(f"{src} is not a directory")
    if str(src).count("/") != 1 or str(src).startswith((".", "/")):
        raise FileNotFoundError(f"{src} is neither a directory nor a hub id (owner/name)")


def resolve_source(src: str | Path) -> Path:
    """A local checkpoint directory, or a Hugging Face hub id downloaded to the local cache (``FileNotFoundError``
    in one line where it cannot be: ``hub_failure``)."""
    check_source_name(src)
    if Path(src).is_dir():
        return Path(src)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(src), allow_patterns=PATTERNS))
    except Exception as exc:  # network, auth, missing repository: one clear line for the CLI
        raise FileNotFoundError(hub_failure(str(src), exc)) from None


def hub_failure(src: str, exc: Exception) -> str:
    """What a failed download of hub id ``src`` means for the user and what to do, in one sentence, from the hub
    library's exception (by its class names, so no version of the library is assumed; the local cache's miss, a
subclass of the missing file's, first)."""
    kinds = {type(exc).__name__} | {c.__name__ for c in type(exc).__mro__}
    if "LocalEntryNotFoundError" in kinds or "OfflineModeIsEnabled" in kinds or "ConnectionError" in kinds:
        return (f"cannot reach the Hugging Face hub to download {src}, and it is not in the local cache: connect to "
                f"the network (and unset HF_HUB_OFFLINE), or download it where the hub is reachable (hf download "
                f"{src} --local-dir DIR) and pass DIR")
    if "HFValidationError" in kinds:
        return (f"{src} is not a hub id: an id is owner/name, each of letters, digits, '-', '_' and '.' (a local "
                "checkpoint is a directory that exists)")
    if "GatedRepoError" in kinds:
        return (f"{src} is a gated repository: accept its terms on huggingface.co and log in (hf auth login), then "
                "run this again")
    if "RepositoryNotFoundError" in kinds:
        return (f"no repository {src} on the hub (or it is private: log in with hf auth login); check the id, or "
                "pass a local directory")
    if "RevisionNotFoundError" in kinds or "EntryNotFoundError" in kinds:
        return f"{src} on the hub has no files this release reads ({', '.join(PATTERNS)})"
    first = next((line for line in str(exc).splitlines() if line.strip()), "no reason given")
    return f"cannot download {src} from the hub: {first.strip()[:200]}"
