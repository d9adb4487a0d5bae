"""Tools in the chat: MCP servers the user adds, and the agent loop's decisions. No Qt.

``config`` (what the user set up), ``host`` (the MCP connections, on a thread of their own),
``loop`` (consent, arguments, results, steps) and ``prompt`` (a tool chat as the model reads
it, through the server's code paths).
"""
