"""Where a message went: the answer of `mqbridge where` and `GET /messages/<id>` (`where`: the running
bridge, the landing ledger, the tables' swap history) and the bounded record of moves to a backout
queue it reads (`backout_log`)."""
