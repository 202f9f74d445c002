// REPL tab completion.
#include "repl/completion.hpp"

#include <algorithm>
#include <cctype>
#include <set>

namespace dtr::repl {

namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

std::vector<std::string> complete(const Evaluator& ev, std::string_view word) {
  std::set<std::string> out;
  if (starts_with(word, ":")) {
    for (std::string_view c : {":nodes", ":help", ":quit"})
      if (starts_with(c, word)) out.emplace(c);
    return {out.begin(), out.end()};
  }
  // A slice bound such as "1:x": complete what follows the last ':'.
  std::string lead;
  if (size_t colon = word.rfind(':'); colon != std::string_view::npos) {
    lead = std::string(word.substr(0, colon + 1));
    word = word.substr(colon + 1);
  }
  if (size_t dot = word.rfind('.'); dot != std::string_view::npos) {
    std::string_view base = word.substr(0, dot), partial = word.substr(dot + 1);
    // "1." or "2.5" is a number, not a receiver.
    if (base.empty() || std::isdigit(static_cast<unsigned char>(base.front()))) return {};
    const auto props = Evaluator::property_names();
    for (const std::string& m : Evaluator::method_names()) {
      if (!starts_with(m, partial)) continue;
      bool property = std::find(props.begin(), props.end(), m) != props.end();
      out.insert(lead + std::string(base) + "." + m + (property ? "" : "("));
    }
    return {out.begin(), out.end()};
  }
  for (const auto& [name, value] : ev.variables())
    if (starts_with(name, word)) out.insert(lead + name);
  for (const std::string& f : Evaluator::function_names())
    if (starts_with(f, word) && !ev.variables().count(f)) out.insert(lead + f + "(");
  for (const std::string& c : Evaluator::constant_names())
    if (starts_with(c, word)) out.insert(lead + c);
  if (starts_with("with", word) && lead.empty()) out.insert("with ");
  return {out.begin(), out.end()};
}

}  // namespace dtr::repl
