"""Model loading: every catalog model kind behind the :class:`~evalfarm.encoders.protocol.Encoder` protocol.

Import :func:`evalfarm.encoders.loader.load_encoder`; heavy libraries load only with the models that need them.
"""

from __future__ import annotations

from evalfarm.encoders.loader import SentencePostProcessed, load_encoder
from evalfarm.encoders.protocol import Encoder, ModelLoadError, NotSupportedYet, WordEncoder

__all__ = ["Encoder", "ModelLoadError", "NotSupportedYet", "SentencePostProcessed", "WordEncoder", "load_encoder"]
