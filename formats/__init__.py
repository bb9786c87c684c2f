"""Conversation formats, kept out of the library core: each adapter reads a file into
:class:`ConversationRecord` objects (validated whole before anything is written), and
``Memory.import_conversations`` writes them. Dataset habits (LoCoMo's captions and ids,
LongMemEval's session ids) are mapped here, never in ``memory``/``programs``/``tools``."""

from .chat_exports import read_chat_export
from .locomo import read_locomo
from .longmemeval import LongMemEvalQuestion, read_longmemeval
from .messages import read_messages, write_messages
from .records import (
    ConversationRecord,
    ImportFormatError,
    Message,
    SessionRecord,
    parse_time,
    to_message,
    to_messages,
)

__all__ = ["ConversationRecord", "ImportFormatError", "LongMemEvalQuestion", "Message",
           "SessionRecord", "parse_time", "read_chat_export", "read_locomo", "read_longmemeval",
           "read_messages", "to_message", "to_messages", "write_messages"]
