// The REPL front end: lines to statements, `:` commands, error reports.
#include "repl/interpreter.hpp"

#include <fmt/format.h>

namespace dtr::repl {

Interpreter::Interpreter(std::ostream& out, std::ostream& err, InterpreterOptions options)
    : out_(out), err_(err), options_(std::move(options)), evaluator_(out) {}

Interpreter::Status Interpreter::feed(std::string_view raw) {
  ++line_number_;
  if (quit_requested()) return Status::Ready;
  std::string_view line = raw;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);

  // Continuation lines: join while brackets are open.
  if (continued_.empty()) {
    continued_ = std::string(line);
    continued_from_ = line_number_;
  } else {
    continued_ += " ";
    continued_ += std::string(line);
  }
  if (open_brackets(continued_) > 0) return Status::More;
  SourceLine logical{std::move(continued_), continued_from_};
  continued_.clear();

  if (!block_.empty()) {
    if (is_blank(logical.text)) {
      if (!options_.interactive) {
        block_.push_back(std::move(logical));
        return Status::More;
      }
      std::vector<SourceLine> block = std::move(block_);
      block_.clear();
      run(block);
      return Status::Ready;
    }
    if (indentation(logical.text) > 0) {
      block_.push_back(std::move(logical));
      return Status::More;
    }
    std::vector<SourceLine> block = std::move(block_);
    block_.clear();
    run(block);
    if (quit_requested()) return Status::Ready;
  }
  if (is_blank(logical.text)) return Status::Ready;
  size_t first = static_cast<size_t>(indentation(logical.text));
  if (logical.text[first] == ':') {
    command(std::string_view(logical.text).substr(first), logical.number);
    return Status::Ready;
  }
  if (opens_block(logical.text) && indentation(logical.text) == 0) {
    block_.push_back(std::move(logical));
    return Status::More;
  }
  run({logical});
  return Status::Ready;
}

void Interpreter::finish() {
  if (!continued_.empty()) {
    SourceLine logical{std::move(continued_), continued_from_};
    continued_.clear();
    if (!block_.empty()) {
      block_.push_back(std::move(logical));
    } else {
      run({logical});  // reports the unclosed bracket
      return;
    }
  }
  if (!block_.empty()) {
    std::vector<SourceLine> block = std::move(block_);
    block_.clear();
    if (!quit_requested()) run(block);
  }
}

void Interpreter::cancel() {
  continued_.clear();
  block_.clear();
}

void Interpreter::run(const std::vector<SourceLine>& lines) {
  std::vector<Stmt> program;
  try {
    program = parse_program(lines);
  } catch (const SyntaxError& e) {
    report(e, e.line());
    return;
  }
  for (const Stmt& s : program) {
    try {
      evaluator_.execute(s, true);
    } catch (const std::exception& e) {
      out_.flush();
      report(e, s.line);
      return;  // the rest of the line or block does not run
    }
    if (quit_requested()) return;
  }
  out_.flush();
}

void Interpreter::command(std::string_view line, int number) {
  std::string cmd(line);
  while (!cmd.empty() && (cmd.back() == ' ' || cmd.back() == '\t')) cmd.pop_back();
  try {
    if (cmd == ":nodes") {
      evaluator_.print_nodes(out_);
    } else if (cmd == ":help") {
      evaluator_.help(out_);
    } else if (cmd == ":quit" || cmd == ":q" || cmd == ":exit") {
      evaluator_.request_quit(0);
    } else {
      throw SyntaxError(fmt::format("unknown command '{}' (commands: :nodes, :help, :quit)", cmd),
                        1, cmd, number);
    }
  } catch (const std::exception& e) {
    report(e, number);
  }
  out_.flush();
}

void Interpreter::report(const std::exception& e, int line) {
  ++failures_;
  std::string prefix = options_.interactive || options_.source.empty()
                           ? std::string()
                           : fmt::format("{}:{}: ", options_.source, line);
  if (const auto* s = dynamic_cast<const SyntaxError*>(&e)) {
    std::string caret;
    for (int i = 0; i + 1 < s->column() && i < static_cast<int>(s->line_text().size()); ++i)
      caret += s->line_text()[i] == '\t' ? '\t' : ' ';
    err_ << prefix << "SyntaxError: " << s->message() << " (column " << s->column() << ")\n"
         << "  " << s->line_text() << "\n"
         << "  " << caret << "^\n";
  } else {
    err_ << prefix << error_kind(e) << ": " << e.what() << "\n";
  }
  err_.flush();
  if (options_.stop_on_error) evaluator_.request_quit(1);
}

}  // namespace dtr::repl
