package natsconn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// UserInfoSubject is where the broker tells a connection who it is: its
// user and its account. Every account can ask it, and an engine user's
// permissions must allow publishing to it (deploy/nats/accounts.conf).
const UserInfoSubject = "$SYS.REQ.USER.INFO"

// accountWait bounds the question: the server the connection is on
// answers it itself, so only a publish the permissions deny, which the
// broker drops, goes unanswered.
const accountWait = 5 * time.Second

// Account is the NATS account nc is in, as the broker names it: the
// account's name in a server configuration, its public key under an
// operator, "$G" on a server without accounts.
func Account(ctx context.Context, nc *nats.Conn) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, accountWait)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, UserInfoSubject, nil)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer in %v; is the engine user allowed to publish to %s? %w", accountWait, UserInfoSubject, err)
		}
		return "", fmt.Errorf("ask the broker for this connection's NATS account on %s: %w", UserInfoSubject, err)
	}
	var answer struct {
		Data *struct {
			Account string `json:"account"`
		} `json:"data"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &answer); err != nil {
		return "", fmt.Errorf("read the broker's answer on %s: %w", UserInfoSubject, err)
	}
	switch {
	case answer.Error != nil:
		return "", fmt.Errorf("the broker answered %s with error %d %s", UserInfoSubject, answer.Error.Code, answer.Error.Description)
	case answer.Data == nil || answer.Data.Account == "":
		return "", fmt.Errorf("the broker's answer on %s names no account: %s", UserInfoSubject, msg.Data)
	}
	return answer.Data.Account, nil
}
