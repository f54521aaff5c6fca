"""`sas completion bash|zsh`: a shell completion script, made from the command's own argparse
parser, so that it names every command and option there is and nothing else.

    eval "$(sas completion bash)"                 # in ~/.bashrc
    eval "$(sas completion zsh)"                  # in ~/.zshrc (through bashcompinit)

The script completes command names and options by position (`sas jobs <TAB>`, `sas jobs wait
--<TAB>`); values (job ids, names) are the user's.
"""

from __future__ import annotations

import argparse
import shlex

SHELLS = ("bash", "zsh")


def words(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """For each command path (`""`, `"jobs"`, `"jobs submit"`), the words that may follow it:
    its subcommands, then its options."""
    found: dict[str, list[str]] = {}
    commands: list[str] = []
    options: list[str] = []
    for action in parser._actions:  # argparse has no public walk of its parsers
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                commands.append(name)
                found.update(words(child, (*path, name)))
        else:
            options += [o for o in action.option_strings if o.startswith("--")]
    found[" ".join(path)] = commands + sorted(set(options))
    return found


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    table = words(parser)
    cases = "\n".join(
        f"        {shlex.quote(path)}) echo {shlex.quote(' '.join(following))} ;;"
        for path, following in sorted(table.items())
    )
    bash = f"""# sas completion ({shell}): eval "$(sas completion {shell})"
_sas_words() {{
    case "$1" in
{cases}
    esac
}}
_sas() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" word i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        case "$word" in -*) continue ;; esac
        case " $(_sas_words "$path") " in *" $word "*) path="${{path:+$path }}$word" ;; esac
    done
    COMPREPLY=($(compgen -W "$(_sas_words "$path")" -- "$cur"))
}}
complete -F _sas sas
"""
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + bash
    return bash
