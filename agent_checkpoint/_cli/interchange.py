"""Interchange commands: ``save``, ``resume``, ``export``, ``diff``, ``merge`` (the seed CLI,
kept, and ``export``, which writes a conversation back in another tool's format).

Exit codes are every command's (``EXIT`` in ``_common``): 0 success; 1 ``diff``: different;
2 bad arguments or an output that cannot be written; 3 a transcript, checkpoint or store key
that does not exist; 4 ``merge`` of two diverged conversations without ``--prefer``; 5 input
that is present but unusable (empty, binary, not JSON, truncated, an oversized line, no
recognised format, no complete turn). ``resume`` exits with its command's code, 128+N if the
command died of signal N, 126 if the command cannot be executed and 127 if it is not found.
Notes about what was left out or repaired go to stderr as ``agent-checkpoint: note: ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson

from .. import (
    EnvelopeError,
    Identity,
    InvalidArgumentError,
    InvalidCheckpointError,
    RunCheckpoint,
    UnrecognizedFormatError,
    validate_checkpoint,
)
from ..backends import mask_url
from ._common import EXIT, CommandError, answered, print_json, progress, read_input, store_from
from ._records import RECORD_ERRORS, read_refusal
from .store_commands import add_json_option, missing_run, unreadable_run

if TYPE_CHECKING:
    from ..transcripts import (
        FORMATS,
        ExportFormat,
        Fork,
        IntegrityPlan,
        Side,
        Transcript,
        Turn,
        checkpoint_to_turns,
        diff_turns,
        export_turns,
        find_fork,
        merged_turns,
        open_transcript,
        plan_integrity,
        turns_to_checkpoint,
        write_export,
        write_turns,
    )


def _load() -> None:
    """The transcript names this module uses, loaded when one of its commands runs: a command
    of another module never imports the transcript readers."""
    from ..transcripts import (  # noqa: F401 (each is used by this module's functions)
        FORMATS,
        ExportFormat,
        Fork,
        IntegrityPlan,
        Side,
        Transcript,
        Turn,
        checkpoint_to_turns,
        diff_turns,
        export_turns,
        find_fork,
        merged_turns,
        open_transcript,
        plan_integrity,
        turns_to_checkpoint,
        write_export,
        write_turns,
    )

    globals().update(locals())


class _Choices:
    """``transcripts.FORMATS`` (or another tuple of it) for argparse's choices, read when a
    value is checked or help is shown, not when the parser is built."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __iter__(self) -> Iterator[str]:
        from ..transcripts import EXPORT_FORMATS, FORMATS

        return iter(FORMATS if self.name == "FORMATS" else EXPORT_FORMATS)

    def __contains__(self, value: object) -> bool:
        return value in list(self)


__all__ = ["INIT_ENV", "register"]

INIT_ENV = "AGENT_CHECKPOINT_INIT"
"""The variable ``resume`` sets to the absolute path of the turn JSONL to resume from."""
EXIT_CANNOT_EXECUTE = EXIT["cannot_execute"]
EXIT_COMMAND_NOT_FOUND = EXIT["command_not_found"]


def note(line: str) -> None:
    print(f"agent-checkpoint: note: {line}", file=sys.stderr)


def counted(n: int, noun: str) -> str:
    """``1 turn``, ``2 turns``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


@contextmanager
def translated() -> Iterator[None]:
    """Input files that cannot be read as ``CommandError``: missing (3) or unreadable (5), as
    for every command; transcript errors go on to ``exit_code_for``."""
    try:
        yield
    except BrokenPipeError:
        raise  # stdout's reader left (save -o - | head): the CLI ends quietly
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        missing = isinstance(exc, FileNotFoundError)
        code = EXIT["not_found"] if missing else EXIT["invalid"]
        raise CommandError(f"{where}{exc.strerror or exc}", code) from exc


def _add_input_format(parser: argparse.ArgumentParser, flag: str = "--format") -> None:
    parser.add_argument(
        flag,
        dest="input_format",
        choices=_Choices("FORMATS"),
        metavar="FORMAT",  # argparse would list the choices when the parser is built
        default=None,
        help="read the input as this format instead of detecting it: %(choices)s",
    )


def _add_export_format(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--to",
        choices=_Choices("EXPORT_FORMATS"),
        required=required,
        default=None,
        metavar="FORMAT",
        help="the format to write (%(choices)s)"
        + ("" if required else "; the command gets that file instead of the turn file"),
    )


def _add_on_dangling(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--on-dangling",
        choices=("drop", "synthesize"),
        default="drop",
        help="a tool call without a result: cut the conversation before it (drop, the "
        "default) or add an error result for it (synthesize)",
    )


def register(sub: Any) -> None:
    """Add ``save``, ``resume``, ``export``, ``diff`` and ``merge`` to the CLI's subparsers."""
    save = sub.add_parser(
        "save",
        help="normalise a transcript into a checkpoint",
        description="Read a transcript (Claude Code log, OpenAI or Anthropic messages, "
        "Responses items, Codex rollout, or turn JSONL), repair its tool calls and write "
        "canonical turn JSONL (-o) or a run checkpoint in a store (--store).",
    )
    save.add_argument("transcript")
    target = save.add_mutually_exclusive_group()
    target.add_argument(
        "-o", "--output", metavar="OUT.jsonl", help="write turn JSONL here ('-': to stdout)"
    )
    target.add_argument(
        "--store", metavar="URL", default=argparse.SUPPRESS, help="put a run checkpoint here"
    )
    save.add_argument(
        "--key",
        help="store key (default: the transcript's session id, else one derived from its path, "
        "so saving it again updates the same record)",
    )
    save.add_argument(
        "--subagent",
        metavar="ID",
        help="Claude Code logs: save the conversation of this sub-agent (its agentId, named "
        "in save's notes) instead of the main one",
    )
    save.add_argument(
        "--session",
        metavar="N",
        type=_session_number,
        help="Aider chat histories: save session N (from 1, in file order) instead of the last "
        "one holding a message",
    )
    _add_input_format(save)
    _add_on_dangling(save)
    add_json_option(save)
    save.set_defaults(run=run_save)

    resume = sub.add_parser(
        "resume",
        help="run a command with AGENT_CHECKPOINT_INIT set to a checkpoint",
        description=f"Check the checkpoint, then run COMMAND with {INIT_ENV} set to the "
        "absolute path of a turn JSONL file, and exit with the command's exit code.",
    )
    resume.add_argument("checkpoint", metavar="CKPT", help="turn JSONL or transcript, or a KEY")
    resume.add_argument(
        "--store", metavar="URL", default=argparse.SUPPRESS, help="read CKPT as a key of this store"
    )
    _add_input_format(resume)
    _add_on_dangling(resume)
    _add_export_format(resume, required=False)
    resume.add_argument("command", nargs="*", help="-- COMMAND [ARG...]")
    resume.set_defaults(run=run_resume)

    export = sub.add_parser(
        "export",
        help="write a checkpoint's conversation in another tool's format",
        description="Read a checkpoint (turn JSONL or any transcript, or a key of --store) and "
        "write its conversation as FORMAT: OpenAI chat or Responses request, Anthropic "
        "request, Codex rollout, Claude Code session log, Gemini CLI session, Aider history, "
        "or turn JSONL. What FORMAT cannot hold is listed on stderr.",
    )
    export.add_argument("checkpoint", metavar="CKPT", help="turn JSONL or transcript, or a KEY")
    _add_export_format(export, required=True)
    export.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    export.add_argument(
        "--store", metavar="URL", default=argparse.SUPPRESS, help="read CKPT as a key of this store"
    )
    export.add_argument(
        "--session-id",
        metavar="ID",
        help="the session id (a UUID) a Claude Code, Codex or Gemini CLI file names (default: a "
        "new one)",
    )
    _add_input_format(export)
    _add_on_dangling(export)
    add_json_option(export)
    export.set_defaults(run=run_export)

    diff = sub.add_parser(
        "diff",
        help="compare two checkpoints turn by turn (exit 0 same, 1 different, 2 error)",
        description="Align the turns of A and B and list what was inserted, removed or changed. "
        "A and B are files (a transcript, turn JSONL, or a run checkpoint or envelope as get "
        "prints it), or with --store two keys of that store.",
    )
    diff.add_argument("a", metavar="A", help="a file, or with --store a key")
    diff.add_argument("b", metavar="B", help="a file, or with --store a key")
    diff.add_argument(
        "--store",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="read A and B as keys of this store (two stored runs)",
    )
    diff.add_argument("-f", "--format", dest="output", choices=("text", "json"), default="text")
    diff.add_argument(
        "--json", dest="output", action="store_const", const="json", help="the same as -f json"
    )
    _add_input_format(diff, "--input-format")
    diff.set_defaults(run=run_diff)

    merge = sub.add_parser(
        "merge",
        help="merge two checkpoints of one conversation at their fork point",
        description="Keep the shared turns of A and B and the turns that extend them. Two "
        "conversations that part ways are refused (exit 4) unless --prefer picks a branch.",
    )
    merge.add_argument("a", metavar="A")
    merge.add_argument("b", metavar="B")
    merge.add_argument("-o", "--output", required=True, metavar="OUT.jsonl")
    merge.add_argument("--prefer", choices=("a", "b"), help="the branch to keep past a fork")
    _add_input_format(merge)
    _add_on_dangling(merge)
    add_json_option(merge)
    merge.set_defaults(run=run_merge)


def _session_number(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"a session number from 1, got {text!r}")
    return number


def _open(
    path: str, fmt: str | None, subagent: str | None = None, session: int | None = None
) -> Transcript:
    return open_transcript(path, format=fmt, subagent=subagent, session=session)  # type: ignore[arg-type]


def _write(path: str, turns: Iterable[Turn]) -> int:
    return _writing(path, lambda target: write_turns(target, turns))


def _writing(path: str, write: Callable[[str | BinaryIO], int]) -> int:
    """``write`` to ``path`` (``-``: stdout); a file that cannot be written is exit 2."""
    try:
        return write(sys.stdout.buffer if path == "-" else path)
    except BrokenPipeError:
        raise  # stdout's reader left (| head): the CLI ends quietly, as every command does
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror or exc}", EXIT["usage"]) from exc


def _not_an_input(output: str, *inputs: str) -> None:
    """Refuse an output that is one of the inputs: the write would replace the transcript
    being read (a Claude Code log, say) with its turns."""
    for source in inputs:
        try:
            same = output != "-" and os.path.samefile(output, source)
        except OSError:  # one of them does not exist (yet): not the same file
            same = False
        if same:
            raise CommandError(f"-o {output} is the input {source}: writing there would replace it")


def default_key(transcript: Transcript, subagent: str | None = None) -> str:
    """The store key ``save`` uses unless given one: the transcript's own session id, else a
    name from its file (stem and a hash of the absolute path), so saving the same transcript
    again updates the same record; a sub-agent's conversation adds ``/<subagent id>``, so it
    never overwrites the main one; so does an Aider session's ``/session-<N>`` (the one read)."""
    session = transcript.session_id()
    if not session:
        import hashlib

        where = hashlib.sha256(os.fsencode(transcript.path.resolve())).hexdigest()[:8]
        session = f"{transcript.path.stem}-{where}"
    if transcript.format == "aider" and transcript.session:
        session = f"{session}/session-{transcript.session}"
    return f"{session}/{subagent}" if subagent else session


def _refuse_nothing_kept(
    source: str, transcript: Transcript, plan: IntegrityPlan, verb: str
) -> None:
    """Refuse (exit 5) a transcript of which nothing of the conversation would be kept, saying
    why: its history is on a server, or every turn is cut for its tool calls."""
    report = plan.report
    if transcript.server_history and all(
        t.role in ("system", "developer") for t in plan.apply(transcript)
    ):
        raise CommandError(
            f"{source}: nothing of the conversation to {verb}: it is stored on OpenAI's servers "
            f"({transcript.server_history}) and this request holds only what it added; {verb} "
            "a request whose input carries the whole conversation, or the items the server "
            "lists for it",
            EXIT["invalid"],
        )
    if report.turns_out == 0:
        why = (
            "every turn follows a tool call that has no result; --on-dangling synthesize keeps them"
            if report.dangling
            else "every tool result answers a call the file does not hold"
        )
        raise CommandError(f"{source}: no complete turn to {verb} ({why})", EXIT["invalid"])


def _ticking(turns: Iterable[Turn], tick: Callable[[], None]) -> Iterator[Turn]:
    for turn in turns:
        yield turn
        tick()


def run_save(args: argparse.Namespace) -> int:
    _load()  # the transcript readers: this command's
    store_url: str = getattr(args, "store", None) or ""
    if not args.output and not store_url:
        raise CommandError(
            "save needs -o OUT.jsonl (a turn JSONL file, or - for stdout) or --store URL; "
            "it does not use $AGENT_CHECKPOINT_STORE, so that a save meant for a file never "
            "lands in a store"
        )
    if args.output and args.key:
        raise CommandError("--key names a record in a store: save -o writes a file, not a store")
    if args.output:
        _not_an_input(args.output, args.transcript)
    with translated():
        transcript = _open(args.transcript, args.input_format, args.subagent, args.session)
        with progress("reading", None, unit="turn(s)"):
            plan = plan_integrity(transcript, policy=args.on_dangling)
        for line in [*transcript.notes, *plan.report.lines()]:
            note(line)
        _refuse_nothing_kept(args.transcript, transcript, plan, "save")
        turns_out = plan.report.turns_out
        with progress("saving", turns_out, unit="turn(s)") as tick:
            turns = _ticking(plan.apply(transcript), tick)
            if args.output:
                count = _write(args.output, turns)
            else:
                key = default_key(transcript, transcript.subagent)
                checkpoint, report = turns_to_checkpoint(turns)
                checkpoint = replace(checkpoint, identity=Identity(key))
    if args.output == "-":  # stdout holds the turns: the report goes to stderr
        note(f"Saved {counted(count, 'turn')} to stdout")
        return EXIT["ok"]
    if args.output:
        if args.json:
            print_json({"turns": count, "output": args.output})
        else:
            print(f"Saved {counted(count, 'turn')} to {args.output}")
        return EXIT["ok"]
    for line in report.lines():
        note(line)
    with store_from(args, create=True) as store:
        summary = store.put(checkpoint, key=args.key)
    where = mask_url(store_url)
    if args.json:
        print_json(
            {
                "turns": turns_out,
                "messages": len(checkpoint.history),
                "store": where,
                "key": summary.key,
                "revision": summary.revision,
                "size": summary.size,
            }
        )
    else:
        print(
            f"Saved {counted(turns_out, 'turn')} ({counted(len(checkpoint.history), 'message')}) "
            f"to {where} as "
            f"{summary.key} (revision {summary.revision})"
        )
    return EXIT["ok"]


class _Resumable:
    """The file handed to the command, and whether it is a temporary copy to remove."""

    def __init__(self, path: Path, temporary: bool) -> None:
        self.path, self.temporary = path, temporary

    def remove(self) -> None:
        if self.temporary:
            self.path.unlink(missing_ok=True)


def _temp_copy(turns: Iterable[Turn], to: ExportFormat | None = None) -> _Resumable:
    """A temporary turn file of ``turns`` (or, with ``to``, the file of that format)."""
    import tempfile

    exported = None if to is None else export_turns(turns, to=to)
    fd, name = tempfile.mkstemp(
        prefix="agent-checkpoint-", suffix=".jsonl" if exported is None else exported.suffix
    )
    os.close(fd)
    path = Path(name)
    try:
        if exported is None:
            write_turns(path, turns)
        else:
            write_export(path, exported)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    if exported is not None:
        for line in exported.notes():
            note(line)
    return _Resumable(path, True)


def _stored_turns(args: argparse.Namespace, verb: str) -> Iterator[Turn]:
    """The turns of the checkpoint under the key ``args.checkpoint`` of ``--store``."""
    store_url: str = args.store
    if args.input_format:
        raise CommandError(
            f"--format reads a file as that format; with --store, {args.checkpoint!r} is a key "
            "of the store, whose checkpoints need none"
        )
    with store_from(args) as store:
        try:
            checkpoint = store.get(args.checkpoint)
        except RECORD_ERRORS as exc:
            current = store.migrations.current
            message = read_refusal(args.checkpoint, exc, current=current)
            raise CommandError(message, EXIT["invalid"]) from exc
    if checkpoint is None:
        raise CommandError(
            f"no checkpoint under key {args.checkpoint!r} in {mask_url(store_url)}",
            EXIT["not_found"],
        )
    if not checkpoint.history:
        raise CommandError(
            f"checkpoint {args.checkpoint!r} has an empty history: nothing to {verb}",
            EXIT["invalid"],
        )
    return checkpoint_to_turns(checkpoint)


def _checked(args: argparse.Namespace, verb: str) -> tuple[Transcript, IntegrityPlan]:
    """The transcript ``args.checkpoint`` and its repair plan, its notes printed; refuses one
    of which nothing would be kept. Call inside ``translated()``."""
    transcript = _open(args.checkpoint, args.input_format)
    plan = plan_integrity(transcript, policy=args.on_dangling)
    for line in [*transcript.notes, *plan.report.lines()]:
        note(line)
    _refuse_nothing_kept(args.checkpoint, transcript, plan, verb)
    return transcript, plan


def _prepare(args: argparse.Namespace) -> _Resumable:
    """Check the checkpoint before anything runs; refuse what cannot be resumed."""
    if getattr(args, "store", None):
        return _temp_copy(_stored_turns(args, "resume"), args.to)
    with translated():
        transcript, plan = _checked(args, "resume")
        if args.to is None and transcript.format == "turns" and not plan.report.changed:
            return _Resumable(Path(args.checkpoint).resolve(), False)
        into = f" as {args.to}" if args.to else ""
        note(f"resuming from a normalised copy of {args.checkpoint} ({transcript.format}){into}")
        return _temp_copy(plan.apply(transcript), args.to)


def run_resume(args: argparse.Namespace) -> int:
    _load()  # the transcript readers: this command's
    command = list(args.command)
    if not command:
        raise CommandError("resume needs a command: resume CKPT -- COMMAND [ARG...]")
    resumable = _prepare(args)
    try:
        return run_command(command, os.environ | {INIT_ENV: str(resumable.path)})
    finally:
        resumable.remove()


def run_command(command: Sequence[str], env: dict[str, str]) -> int:
    """Run ``command`` to completion; its exit code, or 128+N if signal N ended it."""
    import signal
    import subprocess

    try:
        child = subprocess.Popen(list(command), env=env)
    except FileNotFoundError as exc:
        raise CommandError(
            f"cannot run {command[0]!r}: command not found", EXIT_COMMAND_NOT_FOUND
        ) from exc
    except OSError as exc:
        raise CommandError(
            f"cannot run {command[0]!r}: {exc.strerror or exc}", EXIT_CANNOT_EXECUTE
        ) from exc

    def forward(signum: int, frame: FrameType | None) -> None:
        del frame
        child.send_signal(signum)

    # The terminal sends Ctrl-C to the child too; the child decides, and we report its end.
    Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None
    handlers: dict[signal.Signals, Handler] = {}
    wanted: dict[signal.Signals, Handler] = {
        signal.SIGINT: signal.SIG_IGN,
        signal.SIGTERM: forward,
        signal.SIGHUP: forward,
    }
    try:
        for sig, handler in wanted.items():
            try:
                handlers[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread: leave signals alone
                break
        code = child.wait()
    finally:
        for sig, previous in handlers.items():
            signal.signal(sig, previous)
    return 128 - code if code < 0 else code


def run_export(args: argparse.Namespace) -> int:
    _load()  # the transcript readers: this command's
    output: str = args.output or "-"
    _not_an_input(output, args.checkpoint)
    if getattr(args, "store", None):
        turns: list[Turn] = list(_stored_turns(args, "export"))
    else:
        with translated():
            transcript, plan = _checked(args, "export")
            turns = list(plan.apply(transcript))
    try:
        exported = export_turns(turns, to=args.to, session_id=args.session_id)
    except InvalidArgumentError as exc:  # a --session-id that is not a UUID
        raise CommandError(f"--session-id: {exc}") from exc
    for line in exported.notes():
        note(line)
    _writing(output, lambda target: write_export(target, exported))
    session = f" (session {exported.session_id})" if exported.session_id else ""
    lost = len(exported.notes())
    done = (
        f"Exported {counted(exported.turns, 'turn')} to "
        f"{'stdout' if output == '-' else output} as {args.to}{session}"
        + (f"; {counted(lost, 'kind')} of content not carried (see the notes)" if lost else "")
    )
    if output == "-":  # stdout holds the file: the summary goes to stderr
        note(done)
        return EXIT["ok"]
    if args.json:
        print_json(
            {
                "turns": exported.turns,
                "format": args.to,
                "output": output,
                "sessionId": exported.session_id,
                "notCarried": exported.notes(),
            }
        )
    else:
        print(done)
    return EXIT["ok"]


CONVERSATION = "conversation-v1"
"""The envelope format that holds a run checkpoint (what ``get --envelope`` prints)."""


def _checkpoint_file(path: str, refused: UnrecognizedFormatError) -> list[Turn]:
    """The turns of a run checkpoint's JSON, or of an envelope of one (what ``get`` and ``get
    --envelope`` print); ``refused`` (the transcript reader's words) for any other object."""
    try:
        doc = orjson.loads(read_input(path))
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict) or not ("history" in doc or {"format", "data"} <= doc.keys()):
        raise UnrecognizedFormatError(
            f"{path}: neither a transcript this tool reads ({', '.join(FORMATS)}; --input-format "
            "forces one) nor a run checkpoint or an envelope of one (what get prints)"
        ) from refused
    if "history" not in doc and doc.get("format") != CONVERSATION:
        raise CommandError(
            f"{path}: an envelope of {doc.get('format')!r}, not of a conversation "
            f"({CONVERSATION!r}): nothing to compare turn by turn",
            EXIT["invalid"],
        )
    try:
        data = doc if "history" in doc else doc["data"]
        checkpoint = RunCheckpoint.from_json(validate_checkpoint(data))
    except (InvalidCheckpointError, EnvelopeError) as exc:
        raise CommandError(
            f"{path}: not a run checkpoint or an envelope of one: {exc}", EXIT["invalid"]
        ) from exc
    return list(checkpoint_to_turns(checkpoint))


def _compared(path: str, fmt: str | None) -> Iterable[Turn]:
    """One side of ``diff`` read from a file: a transcript, else a checkpoint's JSON."""
    try:
        return _open(path, fmt)
    except UnrecognizedFormatError as exc:
        if fmt is not None:
            raise
        return _checkpoint_file(path, exc)


def _stored_sides(args: argparse.Namespace) -> tuple[list[Turn], list[Turn]]:
    """The turns of the runs stored under keys A and B of ``--store``."""
    if args.input_format:
        raise CommandError(
            "--input-format reads a file as that format; with --store, A and B are keys of "
            "the store, whose checkpoints need none"
        )
    sides = []
    with store_from(args) as store:
        for key in (args.a, args.b):
            try:
                checkpoint = store.get(key)
            except RECORD_ERRORS as exc:
                raise unreadable_run(store, key, exc) from exc
            if checkpoint is None:
                raise missing_run(key, store)
            sides.append(list(checkpoint_to_turns(checkpoint)))
    return sides[0], sides[1]


def run_diff(args: argparse.Namespace) -> int:
    _load()  # the transcript readers: this command's
    if getattr(args, "store", None):
        a, b = _stored_sides(args)
        result = diff_turns(a, b)
    else:
        with translated():
            result = diff_turns(
                _compared(args.a, args.input_format), _compared(args.b, args.input_format)
            )
    code = EXIT["ok"] if result.identical else EXIT["differ"]
    with answered(code):  # diff A B | head: the answer stands however little is read
        if args.output == "json":
            print(json.dumps(result.to_json(), ensure_ascii=False))  # one line, as the seed's
        else:
            for line in result.lines():
                print(line)
    return code


class _Merged:
    def __init__(self, a: Transcript, b: Transcript, fork: Fork, prefer: Side | None) -> None:
        self.a, self.b, self.fork, self.prefer = a, b, fork, prefer

    def __iter__(self) -> Iterator[Turn]:
        return merged_turns(self.a, self.b, self.fork, prefer=self.prefer)


def run_merge(args: argparse.Namespace) -> int:
    _load()  # the transcript readers: this command's
    _not_an_input(args.output, args.a, args.b)
    with translated():
        a = _open(args.a, args.input_format)
        b = _open(args.b, args.input_format)
        fork = find_fork(a, b)
        merged = _Merged(a, b, fork, args.prefer)
        if fork.diverged and args.prefer:
            note(f"{fork.describe()}; kept {args.prefer.upper()}'s branch")
        elif fork.continues:
            note(fork.describe())
        plan = plan_integrity(merged, policy=args.on_dangling)  # refuses a divergence
        for line in plan.report.lines():
            note(line)
        sources: Counter[str | None] = Counter()
        _write(args.output, _tallied(plan.apply(merged), sources))
    # What was written, after the repair cut or added turns: not what the fork offered.
    from_a, from_b = sources.pop("a", 0), sources.pop("b", 0)
    added = sum(sources.values())
    if args.json:
        print_json({"fromA": from_a, "fromB": from_b, "added": added, "output": args.output})
        return EXIT["ok"]
    print(
        f"Merged {counted(from_a, 'turn')} from {args.a} + {counted(from_b, 'new turn')} from "
        f"{args.b} into {args.output}"
        + (f" with {counted(added, 'added error result')}" if added else "")
    )
    return EXIT["ok"]


def _tallied(turns: Iterable[Turn], sources: Counter[str | None]) -> Iterator[Turn]:
    """``turns``, counting them by their ``_meta.source`` (``None`` for added results)."""
    for turn in turns:
        meta = turn.extra.get("_meta")
        source = meta.get("source") if isinstance(meta, dict) else None
        sources[source if isinstance(source, str) else None] += 1
        yield turn
