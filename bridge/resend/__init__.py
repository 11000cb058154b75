"""Messages sent to a queue again, by an operator's command: `mqbridge redrive` moves them from a
listener's backout queue back to its source queue (`redrive`), `mqbridge replay` sends landed rows
back onto a queue (`replay`). Both keep the identity the landing ledger knows a message by, and each
source kind's part of them is declared by its driver (`mqbridge.drivers.Driver.redrive`,
`Driver.replay`)."""
