// Marks an extern "C" entry point of the CUDA runtime ABI. Which symbols are exported is
// decided by the version script generated from protocol/api/cudart.api; inside
// libremora-core.so these definitions are hidden and reached through the generated tables.
#pragma once

#define REMORA_API extern "C" __attribute__((visibility("default")))
