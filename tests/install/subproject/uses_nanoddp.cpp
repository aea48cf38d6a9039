// A consumer's program, configured by tests/install/subproject (not built there).
#include <nanoddp/tensor.h>

int main() { return static_cast<int>(nanoddp::Tensor::zeros({2}, nanoddp::DType::F32).numel()) - 2; }
