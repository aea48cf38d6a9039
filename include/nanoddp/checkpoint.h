// nanoddp's public API: checkpoint files in the safetensors format, which PyTorch and Hugging Face
// read too. SafetensorsWriter (add named tensors, set_metadata, write) and SafetensorsFile (a file
// opened and checked: names, shape, dtype, read, read_into).
#pragma once

#include "core/safetensors.h"
