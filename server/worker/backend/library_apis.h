// The generated tables of the math libraries, by remora::Domain, for the backends: the real
// library's (DlApi, every function resolved through `resolve`) and the dispatch tables
// (library_tables.cc). One place that knows every library the worker serves.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "remora/base/status.h"

namespace remora::worker {

// A gen::<lib>::DlApi of `library`, its functions resolved by name (those `resolve` does
// not find are listed in `missing` and answer "not supported"); nullptr for a domain that
// is not a math library.
std::shared_ptr<void> LoadDlApi(Domain library, const std::function<void*(const char*)>& resolve,
                                std::vector<std::string>* missing);

}  // namespace remora::worker
