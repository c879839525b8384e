from cursor_byok.transport.cursor.proto.agent_pb2 import *  # noqa: F403
