#include "cli/completion.h"

#include <algorithm>
#include <iostream>
#include <memory>
#include <sstream>

namespace hpo::cli {

CLI::Option* Choices(CompletionHints& h, CLI::Option* o, const std::vector<std::string>& values,
                     bool check) {
  if (check) o->check(CLI::IsMember(values));
  h.choices[o] = values;
  return o;
}

CLI::Option* Path(CompletionHints& h, CLI::Option* o) {
  h.paths.insert(o);
  return o;
}

namespace {

// Flags (and --help, --version) expect no value.
bool TakesValue(const CLI::Option* o) { return o->get_expected_max() > 0; }

std::vector<std::string> Names(const CLI::Option* o) {
  std::vector<std::string> out;
  for (const auto& s : o->get_snames()) out.push_back("-" + s);
  for (const auto& l : o->get_lnames()) out.push_back("--" + l);
  return out;
}

std::vector<const CLI::App*> Subcommands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

std::string Join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// In single quotes for sh and zsh.
std::string Quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The bash command that completes a value of `o`; ":" (nothing) for a
// value completion cannot know (an id, a count, an address).
std::string BashValues(const CompletionHints& h, const CLI::Option* o) {
  if (auto it = h.choices.find(o); it != h.choices.end()) {
    return "COMPREPLY=($(compgen -W " + Quoted(Join(it->second)) + " -- \"$cur\"))";
  }
  if (h.paths.count(o)) return "COMPREPLY=($(compgen -f -- \"$cur\"))";
  return ":";
}

}  // namespace

std::string BashCompletion(const CLI::App& app, const CompletionHints& h) {
  const std::string name = app.get_name();
  std::vector<std::string> globals, global_valued, commands;
  for (const CLI::Option* o : app.get_options()) {
    if (!o->nonpositional()) continue;
    for (const auto& n : Names(o)) {
      globals.push_back(n);
      if (TakesValue(o)) global_valued.push_back(n);
    }
  }
  for (const CLI::App* sub : Subcommands(app)) commands.push_back(sub->get_name());
  std::ostringstream out;
  out << "# bash completion for " << name << ", written by `" << name
      << " completion bash` from its own commands and options.\n"
      << "# Load it with: source <(" << name << " completion bash), or save it as\n"
      << "# ~/.local/share/bash-completion/completions/" << name << "\n"
      << "_" << name << "() {\n"
      << "  local cur=${COMP_WORDS[COMP_CWORD]} prev= sub= i\n"
      << "  ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}\n"
      << "  COMPREPLY=()\n"
      << "  # The command is the first word that names one, skipping the values of global "
         "options.\n"
      << "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      << "    case ${COMP_WORDS[i]} in\n";
  if (!global_valued.empty()) {
    std::string alts;
    for (const auto& n : global_valued) alts += (alts.empty() ? "" : "|") + n;
    out << "      " << alts << ") ((i++)) ;;\n";
  }
  std::string command_alts;
  for (const auto& c : commands) command_alts += (command_alts.empty() ? "" : "|") + c;
  out << "      " << command_alts << ") sub=${COMP_WORDS[i]}; break ;;\n"
      << "    esac\n"
      << "  done\n"
      << "  # The value of an option.\n"
      << "  case \"$sub $prev\" in\n";
  for (const CLI::App* sub : Subcommands(app)) {
    for (const CLI::Option* o : sub->get_options()) {
      if (!o->nonpositional() || !TakesValue(o)) continue;
      for (const auto& n : Names(o)) {
        out << "    " << Quoted(sub->get_name() + " " + n) << ") " << BashValues(h, o)
            << "; return ;;\n";
      }
    }
  }
  // After the command too: hpctl lets global options follow it (fallthrough).
  for (const CLI::Option* o : app.get_options()) {
    if (!o->nonpositional() || !TakesValue(o)) continue;
    for (const auto& n : Names(o))
      out << "    *" << Quoted(" " + n) << ") " << BashValues(h, o) << "; return ;;\n";
  }
  out << "  esac\n"
      << "  if [[ $cur == -* ]]; then\n"
      << "    case $sub in\n"
      << "      '') COMPREPLY=($(compgen -W " << Quoted(Join(globals)) << " -- \"$cur\")) ;;\n";
  for (const CLI::App* sub : Subcommands(app)) {
    std::vector<std::string> words;
    for (const CLI::Option* o : sub->get_options()) {
      if (!o->nonpositional()) continue;
      for (const auto& n : Names(o)) words.push_back(n);
    }
    for (const auto& g : globals) {
      if (std::find(words.begin(), words.end(), g) == words.end()) words.push_back(g);
    }
    out << "      " << sub->get_name() << ") COMPREPLY=($(compgen -W " << Quoted(Join(words))
        << " -- \"$cur\")) ;;\n";
  }
  out << "    esac\n"
      << "    return\n"
      << "  fi\n"
      << "  # A command's positional arguments: files, a fixed list, or nothing (ids).\n"
      << "  case $sub in\n"
      << "    '') COMPREPLY=($(compgen -W " << Quoted(Join(commands)) << " -- \"$cur\")) ;;\n";
  for (const CLI::App* sub : Subcommands(app)) {
    std::string values;
    for (const CLI::Option* o : sub->get_options()) {
      if (o->nonpositional()) continue;
      const std::string v = BashValues(h, o);
      if (v != ":" && values.empty()) values = v;
    }
    if (!values.empty()) out << "    " << sub->get_name() << ") " << values << " ;;\n";
  }
  out << "  esac\n"
      << "}\n"
      << "complete -o filenames -F _" << name << " " << name << "\n";
  return out.str();
}

namespace {

// A description inside a zsh _arguments spec's [...] (and its quotes).
std::string ZshDescription(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '[' || c == ']' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

// What follows an option's or positional's name in a zsh spec: ":name:action".
std::string ZshValue(const CompletionHints& h, const CLI::Option* o) {
  // A positional's own name, else the option's long name without dashes.
  std::string label = o->nonpositional() ? "" : o->get_name(true, false);
  if (label.empty() && !o->get_lnames().empty()) label = o->get_lnames().front();
  if (label.empty()) label = "value";
  for (char& c : label) {
    if (c == ':') c = '_';
  }
  if (auto it = h.choices.find(o); it != h.choices.end())
    return ":" + label + ":(" + Join(it->second) + ")";
  if (h.paths.count(o)) return ":" + label + ":_files";
  return ":" + label + ": ";
}

// The _arguments specs of one App's options and positionals, less those
// named as an option of `parent` (each command's --help is the app's too).
std::vector<std::string> ZshSpecs(const CLI::App& app, const CompletionHints& h,
                                  const CLI::App* parent = nullptr) {
  std::set<std::string> inherited;
  if (parent) {
    for (const CLI::Option* o : parent->get_options()) {
      for (const auto& n : Names(o)) inherited.insert(n);
    }
  }
  std::vector<std::string> specs;
  for (const CLI::Option* o : app.get_options()) {
    if (o->nonpositional() && inherited.count(Names(o).front())) continue;
    const std::string desc = "[" + ZshDescription(o->get_description()) + "]";
    if (o->nonpositional()) {
      const auto names = Names(o);
      std::string exclusive = "(" + Join(names) + ")";
      for (const auto& n : names) {
        specs.push_back(Quoted(exclusive + n + desc + (TakesValue(o) ? ZshValue(h, o) : "")));
      }
    } else {
      specs.push_back(Quoted((o->get_required() ? "" : ":") + ZshValue(h, o)));
    }
  }
  return specs;
}

}  // namespace

std::string ZshCompletion(const CLI::App& app, const CompletionHints& h) {
  const std::string name = app.get_name();
  std::ostringstream out;
  out << "#compdef " << name << "\n"
      << "# zsh completion for " << name << ", written by `" << name
      << " completion zsh` from its own commands and options.\n"
      << "# Load it with: source <(" << name << " completion zsh) after compinit, or save it as _"
      << name << " in a directory of $fpath.\n"
      << "_" << name << "() {\n"
      << "  local curcontext=$curcontext state line ret=1\n"
      << "  local -a globals\n"
      << "  globals=(\n";
  for (const auto& spec : ZshSpecs(app, h)) out << "    " << spec << "\n";
  out << "  )\n"
      << "  _arguments -C $globals ':command:->command' '*::argument:->argument' && ret=0\n"
      << "  case $state in\n"
      << "    command)\n"
      << "      local -a commands\n"
      << "      commands=(\n";
  for (const CLI::App* sub : Subcommands(app)) {
    out << "        " << Quoted(sub->get_name() + ":" + sub->get_description()) << "\n";
  }
  out << "      )\n"
      << "      _describe -t commands '" << name << " command' commands && ret=0 ;;\n"
      << "    argument)\n"
      << "      case $line[1] in\n";
  for (const CLI::App* sub : Subcommands(app)) {
    out << "        " << sub->get_name() << ") _arguments $globals";
    for (const auto& spec : ZshSpecs(*sub, h, &app)) out << " \\\n            " << spec;
    out << " && ret=0 ;;\n";
  }
  out << "      esac ;;\n"
      << "  esac\n"
      << "  return ret\n"
      << "}\n"
      << "# Autoloaded from $fpath, this file is the completion function's body; sourced, it "
         "registers it.\n"
      << "if [[ $zsh_eval_context[-1] == loadautofunc ]]; then\n"
      << "  _" << name << " \"$@\"\n"
      << "else\n"
      << "  compdef _" << name << " " << name << "\n"
      << "fi\n";
  return out.str();
}

Command AddCompletion(CLI::App& app, CompletionHints& hints) {
  auto shell = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("completion", "print a shell completion script: bash or zsh");
  Choices(hints, cmd->add_option("shell", *shell, "bash or zsh"), {"bash", "zsh"})->required();
  return {
      cmd,
      [&app, &hints, shell] {
        std::cout << (*shell == "bash" ? BashCompletion(app, hints) : ZshCompletion(app, hints));
        return static_cast<int>(kOk);
      },
      nullptr};
}

}  // namespace hpo::cli
