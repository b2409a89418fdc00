// The worker's end of memory pools shared between processes (protocol/api/cuda.api,
// `worker=Pool*`): cudaMemPoolExportToShareableHandle / ImportFromShareableHandle and
// cudaMemPoolExportPointer / ImportPointer, and the driver's cuMemPool* twins.
//
// A pool created shareable by POSIX descriptor is registered with the supervisor (IPC kind
// "pool", with the driver's descriptor); a session that opens the capability imports the
// driver's pool. Each allocation of an exported pool is exported on its own (kind "pool
// pointer", the driver's export data prefixed with the pool's export id) and opened only into
// an import of that same pool. Lifetime and charges follow cudaIpcGetMemHandle's
// (ipc_state.h): an allocation freed by its exporter while open elsewhere is kept, and
// charged to the exporter, until the last importer frees it (cudaFree/cudaFreeAsync, which
// for an imported allocation closes it). Executor thread only.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace remora::worker {

class Executor;
class OpContext;

CUresult PoolExport(OpContext& x, CUipcMemHandle* capability, unsigned long long pool);
CUresult PoolImport(OpContext& x, unsigned long long* pool, CUipcMemHandle capability);
CUresult PoolExportPointer(OpContext& x, CUipcMemHandle* capability, CUdeviceptr ptr);
CUresult PoolImportPointer(OpContext& x, CUdeviceptr* ptr, size_t* size, unsigned long long pool,
                           CUipcMemHandle capability);

// cudaFree / cudaFreeAsync of `ptr`: true if it was opened from an imported pool - then it
// was closed (given back to its exporter) and nothing else is to be done.
bool ClosePoolPointer(Executor& ex, uint64_t ptr);

}  // namespace remora::worker
