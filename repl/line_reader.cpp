// GNU readline behind LineReader.
#include "repl/line_reader.hpp"

#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include <cstdlib>
#include <cstring>

#include "repl/completion.hpp"

namespace dtr::repl {

namespace {

LineReader::Completer* g_completer = nullptr;
const char* g_primary_prompt = "";
volatile sig_atomic_t g_interrupted = 0;
std::vector<std::string> g_matches;
size_t g_next_match = 0;

char* match_generator(const char* /*text*/, int state) {
  if (state == 0) g_next_match = 0;
  if (g_next_match >= g_matches.size()) return nullptr;
  return strdup(g_matches[g_next_match++].c_str());
}

char** attempted_completion(const char* text, int /*start*/, int /*end*/) {
  rl_attempted_completion_over = 1;  // never fall back to file names
  rl_completion_append_character = '\0';
  g_matches = g_completer ? (*g_completer)(text) : std::vector<std::string>{};
  return rl_completion_matches(text, match_generator);
}

void on_sigint(int) {
  // At the prompt: abandon the line, show a fresh prompt (readline's documented recipe).
  const char nl = '\n';
  ssize_t ignored = write(STDOUT_FILENO, &nl, 1);
  (void)ignored;
  g_interrupted = 1;
  rl_free_line_state();
  rl_set_prompt(g_primary_prompt);
  rl_on_new_line();
  rl_replace_line("", 0);
  rl_redisplay();
}

constexpr int kHistoryLines = 1000;

}  // namespace

std::string default_history_file() {
  if (const char* h = std::getenv("DTR_HISTORY")) return h;
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.dtr_history";
  return {};
}

LineReader::LineReader(std::string history_file, Completer completer, std::string primary_prompt)
    : history_file_(std::move(history_file)), primary_prompt_(std::move(primary_prompt)) {
  g_completer = new Completer(std::move(completer));
  g_primary_prompt = primary_prompt_.c_str();
  rl_readline_name = "dtr-repl";
  rl_attempted_completion_function = attempted_completion;
  rl_completer_word_break_characters = const_cast<char*>(kCompletionWordBreaks);
  rl_catch_signals = 0;
  using_history();
  stifle_history(kHistoryLines);
  if (!history_file_.empty()) {
    read_history(history_file_.c_str());
    if (FILE* f = fopen(history_file_.c_str(), "a")) fclose(f);  // append_history needs it
  }
}

LineReader::~LineReader() {
  if (!history_file_.empty()) history_truncate_file(history_file_.c_str(), kHistoryLines);
  delete g_completer;
  g_completer = nullptr;
}

std::optional<std::string> LineReader::read(const std::string& prompt) {
  struct sigaction sa {
  }, old{};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  g_interrupted = 0;
  sigaction(SIGINT, &sa, &old);
  char* line = readline(prompt.c_str());
  sigaction(SIGINT, &old, nullptr);
  if (!line) return std::nullopt;
  std::string out(line);
  free(line);
  return out;
}

bool LineReader::interrupted() const {
  return g_interrupted != 0;
}

void LineReader::remember(const std::string& line) {
  if (line.find_first_not_of(" \t") == std::string::npos) return;
  if (history_length > 0) {
    HIST_ENTRY* last = history_get(history_base + history_length - 1);
    if (last && last->line && line == last->line) return;
  }
  add_history(line.c_str());
  if (!history_file_.empty()) append_history(1, history_file_.c_str());
}

}  // namespace dtr::repl
