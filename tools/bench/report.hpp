// Output of remora-bench: a Markdown table for people (and docs/PERFORMANCE.md) or JSON.
//
// Contract: every ratio is remoted / native, whatever the unit; the header says which
// direction is better for each unit (time: lower; GB/s: higher). A cell of a failed run or
// measurement reads "error: <reason>", never a number. When the server backend is the host
// emulation the title says "host-emulated, NOT a GPU".
#pragma once

#include <ostream>

#include "runner.hpp"

namespace remora::bench {

void print_table(std::ostream& out, const Report& report, const Selection& selection);
void print_json(std::ostream& out, const Report& report, const Selection& selection);

}  // namespace remora::bench
