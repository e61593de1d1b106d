"""`tinyllm chat`: a conversation on the terminal.

Ctrl-C while a reply streams stops that reply at its next piece (the engine is never interrupted mid-step, so
it stays whole for the next turn) and returns to the prompt; a second Ctrl-C before the reply has stopped
quits. Ctrl-C or Ctrl-D at the prompt quits. Lines that start with '/' are commands (COMMANDS).

A model that reasons (text/reasoning.py) shows its thinking before its answer, dimmed when stdout is a terminal,
or not at all with --hide-thinking; the conversation keeps the answers."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

from .cli_checks import check_room, max_tokens_of
from .errors import TinyLLMError
from .text.reasoning import ReasoningSplitter, Split, opens_in_prompt

DIM, PLAIN = "\x1b[2m", "\x1b[0m"  # ANSI: faint text, then back to normal

COMMANDS = {
    "/reset": "forget the conversation (the system message stays)",
    "/system TEXT": "set the system message (/system alone removes it)",
    "/help": "list these commands",
    "/quit": "quit (so do Ctrl-D and Ctrl-C at the prompt)",
}


class StopReply:
    """While a reply streams, the first SIGINT asks it to stop (`requested`); a second one raises
    KeyboardInterrupt as usual. Outside `with`, SIGINT is Python's own."""

    def __init__(self):
        self.requested = False

    def __enter__(self) -> StopReply:
        self.requested = False
        self.previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def _on_sigint(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGINT, self.previous)


class Chat:
    """The conversation: the messages so far, and the loop that reads a line and streams the reply."""

    def __init__(self, llm, params_for: Callable[[int], object], engine_kwargs: dict, args):
        self.llm, self.params_for, self.engine_kwargs = llm, params_for, engine_kwargs
        self.max_tokens = args.max_tokens
        self.system = args.system
        self.show_thinking = not getattr(args, "hide_thinking", False)
        self.messages: list[dict] = []

    def run(self) -> int:
        if sys.stdin.isatty():
            import readline  # noqa: F401  (line editing and history for input())
        say(
            "Chatting with the model: Ctrl-C stops a reply, Ctrl-D (or Ctrl-C at the prompt) quits, /help lists "
            "the commands."
        )
        while True:
            try:
                line = input("> ")
            except (EOFError, KeyboardInterrupt):
                sys.stdout.write("\n")
                return 0
            if line.startswith("/"):
                if not self.command(line):
                    return 0
            elif line.strip():
                self.turn(line)

    def command(self, line: str) -> bool:
        """Run a /command; False to quit."""
        name, _, rest = line.partition(" ")
        if name in ("/quit", "/exit"):
            return False
        if name == "/reset":
            self.messages = []
            say("(the conversation is forgotten)")
        elif name == "/system":
            self.system = rest.strip() or None
            say(f"(system message: {self.system})" if self.system else "(no system message)")
        elif name == "/help":
            for usage, what in COMMANDS.items():
                say(f"  {usage:14s} {what}")
        else:
            say(f"(unknown command {name}; /help lists them)")
        return True

    def conversation(self, line: str) -> list[dict]:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + self.messages + [{"role": "user", "content": line}]

    def turn(self, line: str) -> None:
        """One user line and its streamed reply, kept in the conversation (as far as it got when stopped);
        a turn that does not fit the context is said, and left out."""
        messages = self.conversation(line)
        reply = []
        with StopReply() as stop:
            try:
                self.stream(messages, reply, stop)
            except TinyLLMError as exc:
                sys.stdout.write("\n" if reply else "")
                say(f"tinyllm: error: {exc} (/reset starts over)")
                return
        sys.stdout.write("\n")
        sys.stdout.flush()
        if stop.requested:
            say("(stopped)")
        self.messages += [messages[-1], {"role": "assistant", "content": "".join(reply)}]

    def stream(self, messages: list[dict], reply: list[str], stop: StopReply) -> None:
        """Stream the reply to `messages` onto stdout (and into `reply`) until it ends or `stop` is asked;
        the conversation and --max-tokens must fit the context."""
        tok = self.llm.tokenizer
        prompt = tok.encode_chat(messages, add_generation_prompt=True)
        check_room(len(prompt.ids), self.max_tokens, self.llm.config.context_length)
        params = self.params_for(max_tokens_of(self.max_tokens))
        shown = Shown(self.show_thinking, sys.stdout.isatty())
        fmt = tok.reasoning
        splitter = ReasoningSplitter(fmt, opens_in_prompt(fmt, prompt.text)) if fmt is not None else None
        stream = self.llm.stream(prompt.ids, params=params, **self.engine_kwargs)
        try:
            for piece in stream:
                reply.append(shown.write(splitter.push(piece) if splitter else Split("", piece)))
                if stop.requested:
                    break
            if splitter is not None:
                reply.append(shown.write(splitter.flush()))
        finally:
            shown.end()
            stream.close()  # aborts the request if it was stopped, and frees its blocks


class Shown:
    """A reply on stdout: its thinking (dimmed on a terminal, or hidden), a line break, then its answer."""

    def __init__(self, show_thinking: bool, is_terminal: bool):
        self.show_thinking, self.is_terminal = show_thinking, is_terminal
        self.thinking = False  # thinking text is on the screen and the answer has not begun

    def write(self, split: Split) -> str:
        """Show one piece; return its answer text."""
        if split.reasoning and self.show_thinking:
            if not self.thinking and self.is_terminal:
                sys.stdout.write(DIM)
            self.thinking = True
            sys.stdout.write(split.reasoning)
        if split.answer:
            self.end()
            sys.stdout.write(split.answer)
        sys.stdout.flush()
        return split.answer

    def end(self) -> None:
        """Close the thinking: back to plain text, on a new line."""
        if self.thinking:
            sys.stdout.write((PLAIN if self.is_terminal else "") + "\n")
            self.thinking = False


def say(text: str) -> None:
    """A line for the person at the terminal, apart from the replies (stderr)."""
    print(text, file=sys.stderr, flush=True)
