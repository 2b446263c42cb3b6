// `moepolicy convert IN... -o OUT`: write a trace in the canonical binary format (.mtrace)
// or as moepolicy routing JSONL (.jsonl) or CSV (.csv) (docs/trace-format.md), replacing
// OUT atomically. Every output reads back with `read_trace` to the same trace.
#include <filesystem>
#include <iostream>
#include <string>
#include <system_error>
#include <vector>

#include "commands.hpp"
#include "common/trace_input.hpp"
#include "moepolicy/detail/file_output.hpp"
#include "moepolicy/io/trace_text.hpp"
#include "moepolicy/trace/canonical.hpp"

namespace moepolicy::tool {

void run_convert(const convert_options& o) {
  const std::vector<std::filesystem::path> paths(o.inputs.begin(), o.inputs.end());
  const std::filesystem::path out = o.output;
  // Canonical to canonical (a version-1 file rewritten as version 2, or a copy) streams
  // from the input's map in bounded memory.
  std::error_code ec;
  if (out.extension() == ".mtrace" && paths.size() == 1 && std::filesystem::is_regular_file(paths.front(), ec) &&
      examples::is_canonical_trace(paths.front())) {
    const canonical_file in(paths.front());
    in.write_current_version(out);
    std::cout << "wrote " << out.string() << ": " << in.num_rows() << " rows, " << in.request_names().size()
              << " requests\n";
    return;
  }
  // Routing JSONL or CSV to canonical streams when the rows are in canonical order.
  if (out.extension() == ".mtrace" && paths.size() == 1 && std::filesystem::is_regular_file(paths.front(), ec)) {
    if (const auto done = examples::write_canonical_from_text(paths.front(), out)) {
      std::cout << "wrote " << out.string() << ": " << done->rows << " rows, " << done->requests << " requests\n";
      return;
    }
  }
  const routing_trace trace = examples::load_trace(paths);
  // Either output replaces OUT only once it is complete (a temporary file beside it,
  // renamed over it): a failed write (a full disk) leaves an earlier OUT as it was.
  if (out.extension() == ".csv") {
    detail::write_file_atomically(out, "moepolicy convert", [&](std::ostream& os) { io::write_trace_csv(trace, os); });
  } else if (out.extension() == ".jsonl") {
    detail::write_file_atomically(out, "moepolicy convert",
                                  [&](std::ostream& os) { io::write_trace_jsonl(trace, os); });
  } else if (out.extension() == ".mtrace") {
    write_canonical(trace, out);
  } else {
    throw option_error("--output", "must end in .mtrace, .jsonl or .csv, got " + out.string());
  }
  std::cout << "wrote " << out.string() << ": " << trace.num_rows() << " rows, " << trace.requests().size()
            << " requests\n";
}

}  // namespace moepolicy::tool
