package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/sluicehq/sluice/internal/sleep"
	"github.com/sluicehq/sluice/internal/storeerr"
)

// TableDefinition returns the CreateTable request that Migrate sends for
// a missing table, for those who create tables in their own
// infrastructure code: a partition key KeyAttribute of type B, no sort
// key, on-demand capacity (PAY_PER_REQUEST). Another capacity mode works
// as well; the key must be as given. Enable time to live on
// ExpiresAttribute afterwards (UpdateTimeToLive), which CreateTable
// cannot do.
func (s *Store) TableDefinition() *dynamodb.CreateTableInput {
	return &dynamodb.CreateTableInput{
		TableName: aws.String(s.table),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(KeyAttribute), AttributeType: types.ScalarAttributeTypeB},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(KeyAttribute), KeyType: types.KeyTypeHash},
		},
		BillingMode: types.BillingModePayPerRequest,
	}
}

// tablePoll is how often Migrate asks whether a table it created is
// ACTIVE; DynamoDB takes seconds to a minute.
const tablePoll = 250 * time.Millisecond

// Migrate makes the store's table ready, and is safe to run at every
// start, from many processes at once:
//
//   - it creates the table (TableDefinition) if it does not exist and
//     waits until it is ACTIVE, or until ctx ends;
//   - it checks that the table's key is KeyAttribute of type B with no
//     sort key, and fails with an error saying what it found otherwise;
//   - it enables time to live on ExpiresAttribute if it is off, and fails
//     if it is on for another attribute.
//
// A server that does not implement UpdateTimeToLive (dynalite, an
// emulator for tests) answers UnknownOperationException; Migrate then
// leaves time to live off, which costs only space: a Store reads an item
// past its expiry as no state whether or not it was deleted.
//
// It needs the IAM actions dynamodb:DescribeTable, dynamodb:CreateTable,
// dynamodb:DescribeTimeToLive and dynamodb:UpdateTimeToLive on the table
// (see the package doc). An error DynamoDB answered with, or no answer,
// wraps driver.ErrUnavailable; a context that ended is ctx.Err(); a table
// unfit for a Store is an error saying why.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.waitActive(ctx); err != nil {
		return storeerr.Wrap("dynamostore: migrate "+s.table, err)
	}
	if err := s.enableTTL(ctx); err != nil {
		return storeerr.Wrap("dynamostore: migrate "+s.table, err)
	}
	return nil
}

// waitActive creates the table if it is missing, waits until it is
// ACTIVE and checks its key.
func (s *Store) waitActive(ctx context.Context) error {
	created := false
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		out, err := s.c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &s.table})
		var nf *types.ResourceNotFoundException
		switch {
		case errors.As(err, &nf) && !created:
			_, err := s.c.CreateTable(ctx, s.TableDefinition())
			var inUse *types.ResourceInUseException
			if err != nil && !errors.As(err, &inUse) { // in use: another process created it
				return classify(ctx, err, false)
			}
			created = true
			continue
		case errors.As(err, &nf):
			// Just created: DynamoDB may not list it yet.
		case err != nil:
			return classify(ctx, err, false)
		case out.Table == nil:
			return errors.New("DescribeTable returned no table")
		case out.Table.TableStatus == types.TableStatusActive || out.Table.TableStatus == types.TableStatusUpdating:
			return checkKey(out.Table)
		case out.Table.TableStatus != types.TableStatusCreating:
			return fmt.Errorf("table is %s, want ACTIVE", out.Table.TableStatus)
		}
		if err := sleep.For(ctx, tablePoll); err != nil {
			return err
		}
	}
}

// checkKey fails unless the table's key is KeyAttribute of type B alone.
func checkKey(t *types.TableDescription) error {
	var hash, other []string
	for _, k := range t.KeySchema {
		if k.KeyType == types.KeyTypeHash {
			hash = append(hash, aws.ToString(k.AttributeName))
		} else {
			other = append(other, aws.ToString(k.AttributeName))
		}
	}
	typ := types.ScalarAttributeType("")
	for _, a := range t.AttributeDefinitions {
		if aws.ToString(a.AttributeName) == KeyAttribute {
			typ = a.AttributeType
		}
	}
	if len(hash) != 1 || hash[0] != KeyAttribute || len(other) != 0 || typ != types.ScalarAttributeTypeB {
		return fmt.Errorf("table has partition key %q (type %q) and sort key %q, want partition key %q of type B and no sort key",
			hash, typ, other, KeyAttribute)
	}
	return nil
}

// enableTTL turns time to live on for ExpiresAttribute unless it is.
func (s *Store) enableTTL(ctx context.Context) error {
	ok, err := s.ttlEnabled(ctx)
	switch {
	case unknownOperation(err):
		return nil
	case err != nil:
		return err
	case ok:
		return nil
	}
	_, err = s.c.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: &s.table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(ExpiresAttribute),
			Enabled:       aws.Bool(true),
		},
	})
	if err == nil || unknownOperation(err) {
		return nil
	}
	// Another process may have enabled it meanwhile, which DynamoDB
	// answers with a ValidationException.
	if ok, derr := s.ttlEnabled(ctx); derr == nil && ok {
		return nil
	}
	return classify(ctx, err, false)
}

// ttlEnabled reports whether time to live is on (or being turned on) for
// ExpiresAttribute, and fails if it is for another attribute.
func (s *Store) ttlEnabled(ctx context.Context) (bool, error) {
	out, err := s.c.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &s.table})
	if unknownOperation(err) {
		return false, err
	}
	if err != nil {
		return false, classify(ctx, err, false)
	}
	d := out.TimeToLiveDescription
	if d == nil {
		return false, nil
	}
	switch d.TimeToLiveStatus {
	case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
		if a := aws.ToString(d.AttributeName); a != ExpiresAttribute {
			return false, fmt.Errorf("time to live is on for attribute %q, want %q: a Store's items would never be deleted", a, ExpiresAttribute)
		}
		return true, nil
	}
	return false, nil
}

// unknownOperation reports whether err says that the server does not
// implement the operation at all (an emulator).
func unknownOperation(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "UnknownOperationException"
}
