// Terminal input for the interactive REPL, on GNU readline: line editing, a persistent
// history (appended after every line, trimmed to the last 1000 at exit) and tab completion
// through a callback (repl/completion.hpp supplies it).
//
// Ctrl-C at the prompt drops the line being typed and shows a fresh primary prompt (the
// caller then drops any pending block: interrupted()); Ctrl-D on an empty line is the end
// of input.
//
// Thread safety: readline is process-global; create one LineReader, and use it from one
// thread.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtr::repl {

// $DTR_HISTORY, else $HOME/.dtr_history, else "" (no persistent history).
std::string default_history_file();

class LineReader {
 public:
  using Completer = std::function<std::vector<std::string>(std::string_view word)>;
  // `primary_prompt` is shown after Ctrl-C.
  LineReader(std::string history_file, Completer completer, std::string primary_prompt);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // One line without its newline; nullopt at the end of input.
  std::optional<std::string> read(const std::string& prompt);
  // Ctrl-C was pressed during the last read().
  bool interrupted() const;
  // Adds a line to the history (and to the history file); blank lines and repeats of the
  // previous line are skipped.
  void remember(const std::string& line);

 private:
  std::string history_file_;
  std::string primary_prompt_;
};

}  // namespace dtr::repl
