"""What the bridge sends besides landing a message, in the unit of work that removes it from its queue:
results to the destination a producer names (`reply_to`: which destinations a listener allows), results
to a type's intermediate stations (`stations`, `[types.X] results_to`) and the messages preprocessors
derive (`outbox`, `mqbridge.emit`). Each source adapter sends them in its commit, so they leave if and
only if the message does. The one exception is opt-in and not a final result: the "stored, not yet
landed" result sent when a message joins a bulk (`stored`, `[types.X] stored_result`), before any commit,
at most once per message."""
