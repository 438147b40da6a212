"""`sgl_kernel.utils`: SGLang 0.5.23 asks it whether programmatic dependent launch is available
(sglang/srt/utils/common.py is_arch_support_pdl callers). The torch stand-ins launch plain kernels: never."""


def is_arch_support_pdl() -> bool:
    return False
