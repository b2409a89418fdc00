#include "remora/memmgr/handle_table.h"

namespace remora {

const char* HandleKindName(HandleKind kind) {
  switch (kind) {
    case HandleKind::kStream: return "stream";
    case HandleKind::kEvent: return "event";
    case HandleKind::kModule: return "module";
    case HandleKind::kFunction: return "function";
    case HandleKind::kVariable: return "variable";
    case HandleKind::kPool: return "memory pool";
    case HandleKind::kPhysical: return "physical allocation";
    case HandleKind::kLink: return "link state";
    case HandleKind::kGraph: return "graph";
    case HandleKind::kGraphExec: return "executable graph";
    case HandleKind::kGraphNode: return "graph node";
    case HandleKind::kUserObject: return "user object";
    case HandleKind::kArray: return "array";
    case HandleKind::kMipmappedArray: return "mipmapped array";
    case HandleKind::kTexObject: return "texture object";
    case HandleKind::kSurfObject: return "surface object";
    case HandleKind::kCublasHandle: return "cuBLAS handle";
    case HandleKind::kCublasLtHandle: return "cuBLASLt handle";
    case HandleKind::kCublasLtMatmulDesc: return "cuBLASLt matmul descriptor";
    case HandleKind::kCublasLtMatrixLayout: return "cuBLASLt matrix layout";
    case HandleKind::kCublasLtMatmulPreference: return "cuBLASLt matmul preference";
    case HandleKind::kCublasLtMatrixTransformDesc: return "cuBLASLt matrix transform descriptor";
    case HandleKind::kCudnnHandle: return "cuDNN handle";
    case HandleKind::kCudnnBackendDescriptor: return "cuDNN backend descriptor";
    case HandleKind::kCudnnTensorDescriptor: return "cuDNN tensor descriptor";
    case HandleKind::kCudnnFilterDescriptor: return "cuDNN filter descriptor";
    case HandleKind::kCudnnConvolutionDescriptor: return "cuDNN convolution descriptor";
    case HandleKind::kCudnnActivationDescriptor: return "cuDNN activation descriptor";
    case HandleKind::kCudnnPoolingDescriptor: return "cuDNN pooling descriptor";
    case HandleKind::kCudnnDropoutDescriptor: return "cuDNN dropout descriptor";
    case HandleKind::kCudnnRnnDescriptor: return "cuDNN RNN descriptor";
    case HandleKind::kCudnnRnnDataDescriptor: return "cuDNN RNN data descriptor";
    case HandleKind::kCudnnMiscDescriptor: return "cuDNN descriptor";
    case HandleKind::kCudnnCtcLossDescriptor: return "cuDNN CTC loss descriptor";
    case HandleKind::kCufftPlan: return "cuFFT plan";
    case HandleKind::kCurandGenerator: return "cuRAND generator";
    case HandleKind::kCusolverDnHandle: return "cuSOLVER dense handle";
    case HandleKind::kCusolverDnParams: return "cuSOLVER dense params";
    case HandleKind::kCusolverSyevjInfo: return "cuSOLVER syevj info";
    case HandleKind::kCusolverGesvdjInfo: return "cuSOLVER gesvdj info";
    case HandleKind::kCusparseHandle: return "cuSPARSE handle";
    case HandleKind::kCusparseMatDescr: return "cuSPARSE matrix descriptor";
    case HandleKind::kCusparseSpMatDescr: return "cuSPARSE sparse matrix descriptor";
    case HandleKind::kCusparseDnMatDescr: return "cuSPARSE dense matrix descriptor";
    case HandleKind::kCusparseDnVecDescr: return "cuSPARSE dense vector descriptor";
    case HandleKind::kCusparseSpVecDescr: return "cuSPARSE sparse vector descriptor";
    case HandleKind::kCusparseSpGEMMDescr: return "cuSPARSE SpGEMM descriptor";
    case HandleKind::kCusparseSpSVDescr: return "cuSPARSE SpSV descriptor";
    case HandleKind::kCudnnLrnDescriptor: return "cuDNN LRN descriptor";
    case HandleKind::kCudnnOpTensorDescriptor: return "cuDNN op-tensor descriptor";
    case HandleKind::kCudnnReduceTensorDescriptor: return "cuDNN reduce-tensor descriptor";
    case HandleKind::kCudnnSpatialTransformerDescriptor: return "cuDNN spatial transformer descriptor";
    case HandleKind::kCudnnTensorTransformDescriptor: return "cuDNN tensor transform descriptor";
    case HandleKind::kCudnnSeqDataDescriptor: return "cuDNN sequence data descriptor";
    case HandleKind::kCudnnAttnDescriptor: return "cuDNN attention descriptor";
    case HandleKind::kCudnnFusedOpsConstParamPack: return "cuDNN fused-ops constant parameter pack";
    case HandleKind::kCudnnFusedOpsVariantParamPack: return "cuDNN fused-ops variant parameter pack";
    case HandleKind::kCudnnFusedOpsPlan: return "cuDNN fused-ops plan";
    case HandleKind::kNcclComm: return "NCCL communicator";
    case HandleKind::kNcclRegistration: return "NCCL buffer registration";
    case HandleKind::kNcclWindow: return "NCCL window";
  }
  return "handle";
}

}  // namespace remora
