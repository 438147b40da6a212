"""`flash_mla.flash_mla_interface` stand-in: the one name SGLang imports from it (tests/gpu)."""


class FlashMLASchedMeta:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("flash_mla stand-in (tests/gpu): FlashMLASchedMeta is not implemented")
